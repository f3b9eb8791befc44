# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private helpers of kubegpu.fleet (bounded I/O, file writes, procfs parsers, versions, TOML
# edit, probe errors): not an API for other collections, may change in any release.
