# -*- coding: utf-8 -*-
"""Unanswered device-plugin calls in the kubelet log (kubelet/allocation_log.py)."""


from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.allocation_log import unanswered_allocations


def test_unanswered_allocations_from_the_journal():

    gpa = ('%s gpu-1 kubelet[812]: I1122 05:00:00.000000     812 manager.go:831] "Issuing a GetPreferredAllocation '
           'call for container" containerName="%s" pod="%s"')
    alloc = ('%s gpu-1 kubelet[812]: I1122 05:00:00.100000     812 manager.go:880] "Making allocation request for '
             'device plugin" devices=["GPU-1"] resourceName="nvidia.com/gpu"')
    lines = [gpa % ("1795323000.5", "main", "ml/train-0"), alloc % "1795323000.6",
             "1795323100.0 gpu-1 kubelet[812]: I1122 sync loop", gpa % ("1795323200.25", "main", "ml/train-late")]
    out = unanswered_allocations(lines, now=1795323500.0)
    assert out == [{"pod": "ml/train-late", "container": "main", "time": 1795323200.25, "age_seconds": 299}]
    assert unanswered_allocations(lines + [alloc % "1795323300.0"]) == []
    # plain klog lines (no journal timestamp): still found, age unknown
    plain = ['I1122 05:00:00.0 812 manager.go:831] "Issuing a GetPreferredAllocation call for container" '
             'containerName="c" podUID="1234"']
    assert unanswered_allocations(plain) == [{"pod": "1234", "container": "c", "time": None, "age_seconds": None}]
