import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils._common.versions import (
    DevicePluginVersion, DriverVersion, SemVer, driver_branch, strip_package_revision)


def test_driver_versions_compare_numerically_and_by_branch():
    assert DriverVersion("570.172.08") > DriverVersion("570.158.01") > DriverVersion("570.86.15")
    assert DriverVersion("575.57.08") > DriverVersion("570.172.08")
    assert DriverVersion("550.40") < DriverVersion("550.40.07")
    assert DriverVersion("570.172.08-0ubuntu1") == DriverVersion("570.172.08")
    assert DriverVersion("3:570.172.08-1.el9").branch == 570
    assert driver_branch("junk") is None
    assert strip_package_revision("1:2.3-4") == "2.3"


@pytest.mark.parametrize("bad", ["", "570", "570.x.1", "v570.1", "570.1.2.3", None, 570])
def test_bad_driver_versions_name_the_value(bad):
    with pytest.raises(ValueError, match=repr(bad).replace("(", r"\(").replace(")", r"\)")):
        DriverVersion(bad)


def test_semver_prerelease_order():
    assert SemVer("1.0.0-beta5") < SemVer("1.0.0-beta10") < SemVer("1.0.0-rc.1") < SemVer("1.0.0")
    assert SemVer("v1.14.6") > SemVer("1.14.5")


def test_device_plugin_release_order_follows_the_real_tag_history():
    order = ["v1.8", "1.11", "v1.12", "1.0.0-beta", "1.0.0-beta4", "1.0.0-beta5", "1.0.0-beta6",
             "v0.6.0", "v0.7.1", "v0.14.5", "v0.17.0", "v0.20.0", "v1.0.0"]
    versions = [DevicePluginVersion(v) for v in order]
    assert versions == sorted(versions)
    assert [v.passes_device_specs() for v in versions] == [
        False, False, False, False, False, True, True, True, True, True, True, True, True]
    with pytest.raises(ValueError, match="'latest'"):
        DevicePluginVersion("latest")


@pytest.mark.parametrize("text", ["\u00b2", "\u0663\u0667\u0660", "\uff15\uff17\uff10"])
def test_versions_with_digits_that_are_not_ascii_are_refused(text):
    """'²'.isdigit() is True and int('²') raises; a str pattern's \\d and int() take Arabic-Indic
    and full-width digits. No package version or tag is written with them: each parser refuses
    them with ValueError naming the value (never another exception, never a number)."""
    for bad in ("%s.172.08" % text, "570.%s.08" % text, "570.172.%s-0ubuntu1" % text):
        with pytest.raises(ValueError, match="570|172|%s" % text):
            DriverVersion(bad)
        assert driver_branch(bad) is None
    for bad in ("%s.0.0" % text, "1.%s.0" % text, "v1.17.%s" % text):
        with pytest.raises(ValueError):
            SemVer(bad)
        with pytest.raises(ValueError):
            DevicePluginVersion(bad)
    with pytest.raises(ValueError):
        DevicePluginVersion("v1.%s" % text)
    with pytest.raises(ValueError):
        DevicePluginVersion("1.0.0-beta%s" % text)
    # a pre-release made of non-ASCII digits is no semver pre-release either
    with pytest.raises(ValueError):
        SemVer("1.0.0-%s" % text)
    assert SemVer("1.0.0-beta5") < SemVer("1.0.0-beta10") < SemVer("1.0.0")
