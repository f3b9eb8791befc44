/*
 * The slice of the NVML C ABI that the kubegpu.fleet fake libnvidia-ml.so.1 implements and the
 * fake nvidia-smi consumes. Written from the public NVML API reference (type layouts match the
 * ctypes structures of nvidia-ml-py); this is not NVIDIA's nvml.h.
 * Copyright: kubegpu.fleet contributors
 * GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
 */
#ifndef KUBEGPU_NVML_FAKE_H
#define KUBEGPU_NVML_FAKE_H

typedef int nvmlReturn_t;

#define NVML_SUCCESS                          0
#define NVML_ERROR_UNINITIALIZED              1
#define NVML_ERROR_INVALID_ARGUMENT           2
#define NVML_ERROR_NOT_SUPPORTED              3
#define NVML_ERROR_NO_PERMISSION              4
#define NVML_ERROR_ALREADY_INITIALIZED        5
#define NVML_ERROR_NOT_FOUND                  6
#define NVML_ERROR_INSUFFICIENT_SIZE          7
#define NVML_ERROR_INSUFFICIENT_POWER         8
#define NVML_ERROR_DRIVER_NOT_LOADED          9
#define NVML_ERROR_TIMEOUT                   10
#define NVML_ERROR_IRQ_ISSUE                 11
#define NVML_ERROR_LIBRARY_NOT_FOUND         12
#define NVML_ERROR_FUNCTION_NOT_FOUND        13
#define NVML_ERROR_CORRUPTED_INFOROM         14
#define NVML_ERROR_GPU_IS_LOST               15
#define NVML_ERROR_RESET_REQUIRED            16
#define NVML_ERROR_OPERATING_SYSTEM          17
#define NVML_ERROR_LIB_RM_VERSION_MISMATCH   18
#define NVML_ERROR_IN_USE                    19
#define NVML_ERROR_MEMORY                    20
#define NVML_ERROR_NO_DATA                   21
#define NVML_ERROR_VGPU_ECC_NOT_SUPPORTED    22
#define NVML_ERROR_INSUFFICIENT_RESOURCES    23
#define NVML_ERROR_FREQ_NOT_SUPPORTED        24
#define NVML_ERROR_ARGUMENT_VERSION_MISMATCH 25
#define NVML_ERROR_DEPRECATED                26
#define NVML_ERROR_NOT_READY                 27
#define NVML_ERROR_GPU_NOT_FOUND             28
#define NVML_ERROR_INVALID_STATE             29
#define NVML_ERROR_RESET_TYPE_NOT_SUPPORTED  30
#define NVML_ERROR_UNKNOWN                  999

#define NVML_DEVICE_MIG_DISABLE 0
#define NVML_DEVICE_MIG_ENABLE  1

/* nvmlGpuVirtualizationMode_t (NVML API reference, "GRID Virtualization Enums") */
typedef unsigned int nvmlGpuVirtualizationMode_t;
#define NVML_GPU_VIRTUALIZATION_MODE_NONE        0
#define NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH 1
#define NVML_GPU_VIRTUALIZATION_MODE_VGPU        2
#define NVML_GPU_VIRTUALIZATION_MODE_HOST_VGPU   3
#define NVML_GPU_VIRTUALIZATION_MODE_HOST_VSGA   4

#define NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE 80
#define NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE   80
#define NVML_DEVICE_UUID_V2_BUFFER_SIZE        96
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE        96
#define NVML_DEVICE_SERIAL_BUFFER_SIZE         30
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE     32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE  16

/* nvmlDeviceArchitecture_t */
#define NVML_DEVICE_ARCH_KEPLER    2
#define NVML_DEVICE_ARCH_MAXWELL   3
#define NVML_DEVICE_ARCH_PASCAL    4
#define NVML_DEVICE_ARCH_VOLTA     5
#define NVML_DEVICE_ARCH_TURING    6
#define NVML_DEVICE_ARCH_AMPERE    7
#define NVML_DEVICE_ARCH_ADA       8
#define NVML_DEVICE_ARCH_HOPPER    9
#define NVML_DEVICE_ARCH_BLACKWELL 10
#define NVML_DEVICE_ARCH_UNKNOWN   0xffffffff

typedef struct nvmlDevice_st *nvmlDevice_t;

typedef struct {
    char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
} nvmlPciInfo_t;

typedef struct {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;

#define nvmlMemory_v2 ((unsigned int)(sizeof(nvmlMemory_v2_t) | (2 << 24)))

typedef struct {
    unsigned int multiprocessorCount;
    unsigned int sharedCopyEngineCount;
    unsigned int sharedDecoderCount;
    unsigned int sharedEncoderCount;
    unsigned int sharedJpegCount;
    unsigned int sharedOfaCount;
    unsigned int gpuInstanceSliceCount;
    unsigned int computeInstanceSliceCount;
    unsigned long long memorySizeMB;
} nvmlDeviceAttributes_t;

/* nvmlDeviceGetSramEccErrorStatus (layout of nvidia-ml-py's c_nvmlEccSramErrorStatus_v1_t) */
typedef struct {
    unsigned int version;
    unsigned long long aggregateUncParity;
    unsigned long long aggregateUncSecDed;
    unsigned long long aggregateCor;
    unsigned long long volatileUncParity;
    unsigned long long volatileUncSecDed;
    unsigned long long volatileCor;
    unsigned long long aggregateUncBucketL2;
    unsigned long long aggregateUncBucketSm;
    unsigned long long aggregateUncBucketPcie;
    unsigned long long aggregateUncBucketMcu;
    unsigned long long aggregateUncBucketOther;
    unsigned int bThresholdExceeded;
} nvmlEccSramErrorStatus_t;

#define nvmlEccSramErrorStatus_v1 ((unsigned int)(sizeof(nvmlEccSramErrorStatus_t) | (1 << 24)))

/* nvmlDeviceGetFieldValues (layout of nvidia-ml-py's c_nvmlFieldValue_t) */
#define NVML_FI_DEV_PCIE_REPLAY_COUNTER           94
#define NVML_FI_DEV_PCIE_REPLAY_ROLLOVER_COUNTER  95
#define NVML_FI_DEV_RESET_STATUS                  226
#define NVML_FI_DEV_DRAIN_AND_RESET_STATUS        227
#define NVML_FI_DEV_GET_GPU_RECOVERY_ACTION       230
#define NVML_VALUE_TYPE_UNSIGNED_INT 1

typedef union {
    double dVal;
    unsigned int uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    long long sllVal;
    int siVal;
    unsigned short usVal;
} nvmlValue_t;

typedef struct {
    unsigned int fieldId;
    unsigned int scopeId;
    long long timestamp;
    long long latencyUsec;
    unsigned int valueType;
    unsigned int nvmlReturn;
    nvmlValue_t value;
} nvmlFieldValue_t;

typedef struct {
    unsigned int version;
    unsigned int bChannelRepairPending;
    unsigned int bTpcRepairPending;
} nvmlRepairStatus_t;
#define nvmlRepairStatus_v1 ((unsigned int)(sizeof(nvmlRepairStatus_t) | (1 << 24)))

typedef struct {
    unsigned int version;
    unsigned int unrepairableMemory;
} nvmlUnrepairableMemory_t;
#define nvmlUnrepairableMemory_v1 ((unsigned int)(sizeof(nvmlUnrepairableMemory_t) | (1 << 24)))

typedef struct {
    unsigned int max, high, partial, low, none;
} nvmlRowRemapperHistogramValues_t;

/* nvmlDeviceGetGpuFabricInfo (c_nvmlGpuFabricInfo_t) */
typedef struct {
    unsigned char clusterUuid[16];
    unsigned int status;
    unsigned int cliqueId;
    unsigned int state;
} nvmlGpuFabricInfo_t;

/* nvmlProcessInfo_t as nvmlDeviceGetComputeRunningProcesses_v3 fills it */
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t;

#endif
