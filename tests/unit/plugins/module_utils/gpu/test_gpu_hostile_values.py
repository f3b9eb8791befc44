"""Values no tool on the node writes: sysfs PCI attributes that int(..., 16) would take but the
kernel never prints, and nvidia-smi XML documents or values past the parse bounds."""
import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu import pci as gpu_pci
from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu import smi as gpu_smi

DOC = ('<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">\n'
       '<nvidia_smi_log><driver_version>570.172.08</driver_version><attached_gpus>1</attached_gpus>'
       '<gpu id="00000000:3B:00.0"><product_name>NVIDIA H100 80GB HBM3</product_name>'
       '<uuid>GPU-1b2c3d4e-0000-0000-0000-000000000000</uuid><minor_number>0</minor_number>'
       '</gpu></nvidia_smi_log>\n')


@pytest.mark.parametrize("raw, value", [
    (b"0x10de\n", 0x10de), (b"0x10DE", 0x10de), (b"0x030200\n", 0x030200),
    (b"10de\n", None), (b"0x1_0de\n", None), (u"\u0660x10de\n".encode("utf-8"), None),
    (b"0x\n", None), (b"0x10de\n\n", None), (b" 0x10de\n", None), (b"0x10de\x00", None),
    (b"\xff\xfe\n", None), (b"0x" + b"f" * 9 + b"\n", None), (b"", None),
])
def test_pci_attributes_are_the_kernels_hex_or_an_error(tmp_path, raw, value):
    path = tmp_path / "vendor"
    path.write_bytes(raw)
    got, err = gpu_pci._hex_attr(str(path))  # pylint: disable=protected-access
    assert got == value
    if value is None:
        assert "does not hold a hex number" in err


def test_smi_document_is_parsed_under_the_shared_bounds():
    assert gpu_smi.parse_smi_xml(DOC)["gpus"][0]["pci_bus_id"] == "00000000:3B:00.0"
    with pytest.raises(gpu_smi.SmiParseError, match="more than the %d this parses" % gpu_smi.MAX_XML):
        gpu_smi.parse_smi_xml(DOC.replace("HBM3", "x" * gpu_smi.MAX_XML))
    laughs = DOC.replace('<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">',
                         '<!DOCTYPE nvidia_smi_log [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;&a;&a;">]>')
    with pytest.raises(gpu_smi.SmiParseError, match="declares entities"):
        gpu_smi.parse_smi_xml(laughs.replace("HBM3", "&b;"))


def test_smi_values_longer_than_any_nvidia_smi_prints_are_not_believed():
    big = gpu_smi.MAX_FIELD + 1
    g = gpu_smi.parse_smi_xml(DOC.replace("00000000:3B:00.0", "A" * big)
                              .replace("<minor_number>0<", "<minor_number>%s<" % ("9" * big))
                              .replace("NVIDIA H100 80GB HBM3", "N" * big))["gpus"][0]
    assert (g["pci_bus_id"], g["minor_number"], g["name"]) == (None, None, None)
    g = gpu_smi.parse_smi_xml(DOC.replace("NVIDIA H100 80GB HBM3", "N" * gpu_smi.MAX_FIELD))["gpus"][0]
    assert g["name"] == "N" * gpu_smi.MAX_FIELD
