"""kubegpu.fleet GPU node lab: booted Debian nodes, fake NVIDIA stack, fake kubelet, API double."""
