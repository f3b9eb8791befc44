# -*- coding: utf-8 -*-
"""RFC 7386 merge patch (kubelet/merge_patch.py)."""

import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.merge_patch import merge_patch


def test_merge_patch():
    base = {"a": {"b": 1, "c": [1, 2]}, "d": 1, "e": 2}
    assert merge_patch(base, {"a": {"c": [3], "x": 1}, "d": None}) == {
        "a": {"b": 1, "c": [3], "x": 1}, "e": 2}
    assert base == {"a": {"b": 1, "c": [1, 2]}, "d": 1, "e": 2}


# RFC 7386 section 3, "Example Test Cases": (original, patch, result), all eighteen of them.
RFC7386_CASES = [
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    (["a", "b"], ["c", "d"], ["c", "d"]),
    ({"a": "b"}, ["c"], ["c"]),
    ({"a": "foo"}, None, None),
    ({"a": "foo"}, "bar", "bar"),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
]


@pytest.mark.parametrize("original,patch,result", RFC7386_CASES)
def test_merge_patch_rfc7386_examples(original, patch, result):
    assert merge_patch(original, patch) == result


def test_merge_patch_rfc7386_section1_example_keeps_order_and_shares_nothing():
    target = {"title": "Goodbye!", "author": {"givenName": "John", "familyName": "Doe"},
              "tags": ["example", "sample"], "content": "This will be unchanged"}
    patch = {"title": "Hello!", "phoneNumber": "+01-123-456-7890",
             "author": {"familyName": None}, "tags": ["example"]}
    out = merge_patch(target, patch)
    assert out == {"title": "Hello!", "author": {"givenName": "John"}, "tags": ["example"],
                   "content": "This will be unchanged", "phoneNumber": "+01-123-456-7890"}
    assert list(out) == ["title", "author", "tags", "content", "phoneNumber"]  # new keys last
    out["author"]["givenName"] = "Jane"
    out["tags"].append("x")
    assert target["author"]["givenName"] == "John" and patch["tags"] == ["example"]
