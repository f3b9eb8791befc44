# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""RFC 7386 JSON merge patch, the one merge of the collection's kubelet code.

Node side, Python 3.8+.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type


def merge_patch(target, patch):
    """RFC 7386 JSON merge patch: ``patch`` over ``target``, both left untouched.

    The one merge of the collection: ``--config-dir`` drop-ins over the config (as the kubelet
    applies them) and kubelet_config's settings over the file. A mapping merges key by key
    (existing keys keep their place, new ones go last), ``None`` deletes a key, anything else
    (arrays included) replaces. The result shares nothing mutable with the inputs."""
    if not isinstance(patch, dict):
        return _copy(patch)
    out = dict((k, _copy(v)) for k, v in target.items()) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _copy(value):
    if isinstance(value, dict):
        return dict((k, _copy(v)) for k, v in value.items())
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value
