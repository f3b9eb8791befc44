# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Maintainer tools for the known-bad catalog (not part of the Galaxy artifact: scripts/ is in
galaxy.yml's build_ignore): ``importer`` turns NVIDIA CSAF 2.0 bulletins into catalog entries,
run by ``scripts/import_csaf.py``."""
