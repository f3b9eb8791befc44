"""Boot loader formats (plugins/module_utils/boot/formats.py) on files in the shapes the tools write:
grubenv blocks written by the real grub-editenv (GRUB 2.06, Debian 12), grub.cfg as grub-mkconfig
writes it on Debian 12 (GRUB_DEFAULT=0), Ubuntu 24.04 (GRUB_DEFAULT=0 and =saved, a newer
6.8.0-1015-nvidia beside the generic kernels: version_sort puts it first) and Rocky 9 (blscfg,
BLS entries as kernel-install writes them, grubenv saved_entry as grubby sets it), systemd-boot's
loader.conf and efivars, needrestart's batch output and dnf needs-restarting's answers; then
hostile input (no signature, binary, huge menus, unbalanced braces)."""
import os

import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils.boot import formats as f

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "fixtures", "boot")
DEB_UUID = "3f1c8a5e-2b7d-4c9e-8f0a-6d5b4c3a2e1f"
UBU_UUID = "b6a3c1d2-7e8f-4a5b-9c0d-1e2f3a4b5c6d"
ROCKY_ID = "5b1d3a7e0f8c4b3e9a2d6c1f0e7a9b4c"


def fixture(name, mode="r"):
    with open(os.path.join(FIX, name), mode) as fh:
        return fh.read()


def rocky_bls():
    d = os.path.join(FIX, "rocky9", "loader", "entries")
    return [(n[:-5], f.parse_bls_entry(fixture(os.path.join("rocky9", "loader", "entries", n))))
            for n in sorted(os.listdir(d))]


def boots(cfg_text, env, bls=()):
    """(kernel, once, matched) the way facts.py resolves them."""
    cfg = f.parse_grub_cfg(cfg_text)
    menu = f.expand_menu(cfg["menu"], f.bls_menu(list(bls)))
    value, _source, once, _notes = f.grub_default(cfg["defaults"], env)
    item, _path, matched = f.resolve_grub_entry(menu, value)
    return (item or {}).get("kernel"), once, matched


# ------------------------------------------------------------------ grubenv

def test_grubenv_written_by_grub_editenv():
    data = fixture("rocky9/grub2/grubenv", "rb")
    assert len(data) == f.GRUBENV_SIZE and data.endswith(b"#")
    assert f.parse_grubenv(data) == {"saved_entry": ROCKY_ID + "-5.14.0-427.13.1.el9_4.x86_64",
                                     "menu_auto_hide": "1", "boot_success": "0", "boot_indeterminate": "0"}
    # grub-editenv escapes "\" and newline with "\" (envblk.c): a value with both comes back whole
    escaped = fixture("grubenv-debian-escaped", "rb")
    assert b"weird=a\\\\b\\\nc\n" in escaped
    assert f.parse_grubenv(escaped) == {
        "saved_entry": "gnulinux-advanced-x>gnulinux-6.1.0-27-amd64-advanced-x", "weird": "a\\b\nc"}


@pytest.mark.parametrize("data", [b"", b"saved_entry=x\n", b"\x7fELF\x02\x01" + os.urandom(1018),
                                  b"# GRUB Environment Blocks\nsaved_entry=x\n", "text, not bytes"])
def test_not_a_grubenv(data):
    with pytest.raises(f.BootFormatError):
        f.parse_grubenv(data)


def test_grubenv_lines_without_value_or_with_junk_are_skipped():
    data = f.GRUBENV_SIGNATURE + b"no equals here\n\xff\xfe=bad name\nsaved_entry=0\n" + b"#" * 900
    assert f.parse_grubenv(data) == {"\ufffd\ufffd": "bad name", "saved_entry": "0"}
    # a value running to the end of a block without newline or padding still ends
    assert f.parse_grubenv(f.GRUBENV_SIGNATURE + b"next_entry=1>2\\") == {"next_entry": "1>2\\"}


# ------------------------------------------------------------------ grub.cfg, Debian 12

def test_debian12_default_zero_boots_the_newest_entry():
    cfg = f.parse_grub_cfg(fixture("debian12-grub.cfg"))
    assert [d["value"] for d in cfg["defaults"]] == ["${next_entry}", "0"]
    top = [(m["type"], m["title"]) for m in cfg["menu"]]
    assert top == [("entry", "Debian GNU/Linux"), ("submenu", "Advanced options for Debian GNU/Linux"),
                   ("entry", "UEFI Firmware Settings")]
    adv = cfg["menu"][1]
    assert adv["id"] == "gnulinux-advanced-" + DEB_UUID
    assert [(c["id"], c["kernel"]) for c in adv["children"]] == [
        ("gnulinux-6.1.0-27-amd64-advanced-" + DEB_UUID, "6.1.0-27-amd64"),
        ("gnulinux-6.1.0-27-amd64-recovery-" + DEB_UUID, "6.1.0-27-amd64"),
        ("gnulinux-6.1.0-26-amd64-advanced-" + DEB_UUID, "6.1.0-26-amd64"),
        ("gnulinux-6.1.0-26-amd64-recovery-" + DEB_UUID, "6.1.0-26-amd64")]
    assert boots(fixture("debian12-grub.cfg"), {}) == ("6.1.0-27-amd64", False, True)


@pytest.mark.parametrize("next_entry", [
    "gnulinux-advanced-%s>gnulinux-6.1.0-26-amd64-advanced-%s" % (DEB_UUID, DEB_UUID),
    "Advanced options for Debian GNU/Linux>Debian GNU/Linux, with Linux 6.1.0-26-amd64",
    "1>2", "1>gnulinux-6.1.0-26-amd64-recovery-%s" % DEB_UUID])
def test_debian12_grub_reboot_next_entry_boots_once(next_entry):
    assert boots(fixture("debian12-grub.cfg"), {"next_entry": next_entry}) == ("6.1.0-26-amd64", True, True)


@pytest.mark.parametrize("value", ["gnulinux-6.1.0-26-amd64-advanced-" + DEB_UUID,  # no submenu part
                                   "1", "7", "1>9", "Debian GNU/Linux, with Linux 6.1.0-26-amd64"])
def test_debian12_a_default_naming_no_entry_boots_the_first(value):
    cfg = f.parse_grub_cfg(fixture("debian12-grub.cfg"))
    item, path, matched = f.resolve_grub_entry(cfg["menu"], value)
    assert (item["kernel"], path, matched) == ("6.1.0-27-amd64", "0", False)


# ------------------------------------------------------------------ grub.cfg, Ubuntu 24.04

def test_ubuntu2404_default_zero_boots_the_nvidia_flavour():
    """grub-mkconfig sorts every vmlinuz-* by version: 6.8.0-1015-nvidia comes first, so a node
    running 6.8.0-50-generic boots the nvidia kernel next."""
    assert boots(fixture("ubuntu2404-grub.cfg"), {}) == ("6.8.0-1015-nvidia", False, True)
    assert boots(fixture("ubuntu2404-grub.cfg"), {"saved_entry": "anything"}) == ("6.8.0-1015-nvidia", False, True)


def test_ubuntu2404_saved_default():
    cfg = fixture("ubuntu2404-saved-grub.cfg")
    generic = "gnulinux-advanced-%s>gnulinux-6.8.0-50-generic-advanced-%s" % (UBU_UUID, UBU_UUID)
    assert boots(cfg, {"saved_entry": generic}) == ("6.8.0-50-generic", False, True)
    assert boots(cfg, {"saved_entry": "Advanced options for Ubuntu>Ubuntu, with Linux 6.8.0-49-generic"}) == (
        "6.8.0-49-generic", False, True)
    # saved_entry unset: default="" -> the first entry
    assert boots(cfg, {}) == ("6.8.0-1015-nvidia", False, True)
    # a saved entry whose kernel was removed: GRUB boots the first entry
    assert boots(cfg, {"saved_entry": generic.replace("50", "40")}) == ("6.8.0-1015-nvidia", False, False)
    # grub-reboot wins over the saved entry for one boot
    assert boots(cfg, {"saved_entry": generic, "next_entry": "1>4"}) == ("6.8.0-49-generic", True, True)


# ------------------------------------------------------------------ Rocky 9 (blscfg)

def test_rocky9_blscfg_menu_and_saved_entry():
    cfg = f.parse_grub_cfg(fixture("rocky9/grub2/grub.cfg"))
    assert cfg["blscfg"] is True
    value, source, once, notes = f.grub_default(cfg["defaults"], {"saved_entry": "x"})
    assert (value, once) == ("x", False) and "saved_entry" in source
    assert notes == ["grub.cfg sets default=1 only when [ -n ${boot_counter} -a ${boot_success} = 0 ] and "
                     "[ ${boot_counter} = 0 -o ${boot_counter} = -1 ] (not evaluated)"]
    menu = f.expand_menu(cfg["menu"], f.bls_menu(rocky_bls()))
    assert [m["id"] for m in menu] == [ROCKY_ID + "-5.14.0-427.13.1.el9_4.x86_64+rt",
                                       ROCKY_ID + "-5.14.0-427.13.1.el9_4.x86_64",
                                       ROCKY_ID + "-5.14.0-362.8.1.el9_3.x86_64",
                                       ROCKY_ID + "-0-rescue", "uefi-firmware"]
    assert [m["kernel"] for m in menu][:4] == ["5.14.0-427.13.1.el9_4.x86_64+rt", "5.14.0-427.13.1.el9_4.x86_64",
                                               "5.14.0-362.8.1.el9_3.x86_64", None]
    env = f.parse_grubenv(fixture("rocky9/grub2/grubenv", "rb"))
    assert boots(fixture("rocky9/grub2/grub.cfg"), env, rocky_bls()) == ("5.14.0-427.13.1.el9_4.x86_64", False, True)
    # without a saved entry the first BLS entry boots: the realtime kernel of the same build
    assert boots(fixture("rocky9/grub2/grub.cfg"), {}, rocky_bls()) == ("5.14.0-427.13.1.el9_4.x86_64+rt", False, True)


def test_bls_entry_keys():
    e = f.parse_bls_entry(fixture("rocky9/loader/entries/%s-5.14.0-427.13.1.el9_4.x86_64.conf" % ROCKY_ID))
    assert e["title"] == "Rocky Linux (5.14.0-427.13.1.el9_4.x86_64) 9.4 (Blue Onyx)"
    assert e["version"] == "5.14.0-427.13.1.el9_4.x86_64"
    assert e["linux"] == "/vmlinuz-5.14.0-427.13.1.el9_4.x86_64"
    assert e["initrd"] == ["/initramfs-5.14.0-427.13.1.el9_4.x86_64.img $tuned_initrd"]
    assert e["grub_class"] == "rocky"
    # an image not named vmlinuz-RELEASE (Arch, a UKI): the entry's version names the kernel
    items = f.bls_menu([("arch", {"linux": "/vmlinuz-linux", "version": "6.12.1-arch1-1", "title": "Arch"})])
    assert items[0]["kernel"] == "6.12.1-arch1-1"


# ------------------------------------------------------------------ systemd-boot

def test_loader_conf_and_efivars():
    conf = f.parse_loader_conf("# comment\ntimeout 3\ndefault  debian-*\nconsole-mode keep\n")
    assert conf == {"timeout": "3", "default": "debian-*", "console-mode": "keep"}
    items = f.bls_menu([("debian-6.1.0-26-amd64", {"linux": "/vmlinuz-6.1.0-26-amd64", "version": "6.1.0-26-amd64"}),
                        ("debian-6.1.0-27-amd64", {"linux": "/vmlinuz-6.1.0-27-amd64", "version": "6.1.0-27-amd64"}),
                        ("fallback", {"linux": "/vmlinuz-6.1.0-9-amd64", "version": "6.1.0-9-amd64"})])
    assert f.match_loader_default(items, "debian-*")["kernel"] == "6.1.0-27-amd64"
    assert f.match_loader_default(items, "debian-6.1.0-26-amd64.conf")["kernel"] == "6.1.0-26-amd64"
    assert f.match_loader_default(items, "fall*")["kernel"] == "6.1.0-9-amd64"
    assert f.match_loader_default(items, "arch-*") is None
    var = b"\x07\x00\x00\x00" + "debian-6.1.0-26-amd64.conf".encode("utf-16-le") + b"\x00\x00"
    assert f.parse_efivar_string(var) == "debian-6.1.0-26-amd64.conf"
    for bad in (b"", b"\x07\x00\x00\x00", b"\x07\x00\x00\x00\x00", b"\x07\x00\x00\x00\x00\xd8"):
        assert f.parse_efivar_string(bad) is None


# ------------------------------------------------------------------ distribution answers

def test_needrestart_batch_output():
    # needrestart's README.batch.md example, and needrestart 3.6 (Debian 12) on a kernel it cannot place
    out = f.parse_needrestart("NEEDRESTART-VER: 2.1\nNEEDRESTART-KCUR: 3.19.3-tl1+\nNEEDRESTART-KEXP: 3.19.3-tl1+\n"
                              "NEEDRESTART-KSTA: 1\nNEEDRESTART-SVC: systemd-journald.service\n")
    assert out == {"version": "2.1", "kcur": "3.19.3-tl1+", "kexp": "3.19.3-tl1+", "ksta": "1", "status": "current"}
    out = f.parse_needrestart("NEEDRESTART-VER: 3.6\nNEEDRESTART-KCUR: 6.18.44-fc-v769\nNEEDRESTART-KSTA: 0\n")
    assert (out["kexp"], out["status"]) == (None, "unknown")
    out = f.parse_needrestart("NEEDRESTART-VER: 3.6\nNEEDRESTART-KCUR: 6.8.0-50-generic\n"
                              "NEEDRESTART-KEXP: 6.8.0-1015-nvidia\nNEEDRESTART-KSTA: 3\n")
    assert (out["kexp"], out["status"]) == ("6.8.0-1015-nvidia", "version upgrade pending")
    assert f.parse_needrestart("garbage\n\x00\x01: 2\n")["ksta"] is None


def test_dnf_needs_restarting_answers():
    yes = ("Core libraries or services have been updated since boot-up:\n  * kernel\n\n"
           "Reboot is required to fully utilize these updates.\n"
           "More information: https://access.redhat.com/solutions/27943\n")
    assert f.parse_needs_restarting(1, yes, "")[0] is True
    assert f.parse_needs_restarting(0, "No core libraries or services have been updated since boot-up.\n"
                                       "Reboot should not be necessary.\n", "")[0] is False
    # dnf without the plugin exits 1 too: not a reboot
    required, why = f.parse_needs_restarting(1, "", "No such command: needs-restarting. Please use /usr/bin/dnf --help\n")
    assert required is None and "No such command" in why
    assert f.parse_needs_restarting(-9, "", "")[0] is None


# ------------------------------------------------------------------ GRUB script words, hostile grub.cfg

def test_grub_words():
    assert f._tokens("""menuentry 'It'\\''s "x"' --class os $menuentry_id_option 'id 1' {""") == [
        "menuentry", "It's \"x\"", "--class", "os", "$menuentry_id_option", "id 1", "{"]
    assert f._tokens('set default="${saved_entry}"  # comment') == ["set", "default=${saved_entry}"]
    assert f._tokens('echo a\\ b "c\\"d" #x') == ["echo", "a b", 'c"d']   # "#" starts a comment
    assert f._tokens("echo a#b") == ["echo", "a#b"]
    assert f._entry_head(["Title", "--id=abc", "--class", "x"]) == ("Title", "abc")


def test_huge_and_deep_menus_are_cut_and_said():
    many = "".join("menuentry 'e%d' {\n linux /vmlinuz-6.1.0-%d-amd64\n}\n" % (i, i) for i in range(f.MAX_ENTRIES + 50))
    cfg = f.parse_grub_cfg(many)
    assert cfg["truncated"] is True and len(cfg["menu"]) == f.MAX_ENTRIES
    deep = "submenu 's' {\n" * 40 + "menuentry 'x' {\nlinux /vmlinuz-1.0\n}\n" + "}\n" * 40
    cfg = f.parse_grub_cfg(deep)
    assert cfg["truncated"] is True
    # unbalanced braces, binary, a linux line outside entries: no exception, nothing invented
    junk = "}\n}\nlinux /vmlinuz-9.9\nmenuentry 'a' {\n\x00\xff\x01 {\n" + "\ufffd" * 1000
    cfg = f.parse_grub_cfg(junk)
    assert [m["title"] for m in cfg["menu"]] == ["a"] and cfg["menu"][0]["kernel"] is None
    assert f.resolve_grub_entry([], "0") == (None, "0", False)
    assert f.resolve_grub_entry([], None) == (None, "0", False)
    assert f.resolve_grub_entry(cfg["menu"], "") == (cfg["menu"][0], "0", True)


def test_kernel_of_image():
    assert f.kernel_of_image("/boot/vmlinuz-6.1.0-27-amd64") == "6.1.0-27-amd64"
    assert f.kernel_of_image("($root)/vmlinuz-5.14.0-427.13.1.el9_4.x86_64") == "5.14.0-427.13.1.el9_4.x86_64"
    for other in ("/vmlinuz", "/boot/vmlinuz-0-rescue-abc", "/EFI/Linux/x.efi", "", None, "/vmlinuz-linux"):
        assert f.kernel_of_image(other) is None
