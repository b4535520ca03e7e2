#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""CPython's own test_ftplib (Debian's libpython3.11-testsuite), run by
unittest with one correction from upstream CPython (python/cpython#109845):
its dummy server decodes each recv(1024) chunk on its own, so a chunk
boundary between the two bytes of the UTF-8 '\\xae' at the end of RETR_DATA
becomes two replacement characters and test_storlines fails
'12019 != 12018' on plain TCP under load too. Here the server keeps the
bytes it received and decodes all of them, which still fails on any byte
lost, added or changed. A test suite that has the upstream fix (3.11.7 and
later keep bytes) runs as it is. Exit status 0 when every test passed."""
import inspect
import sys
import unittest

from test import test_ftplib

Handler = test_ftplib.DummyDTPHandler
plain_init = Handler.__init__


def init(self, conn, baseclass):
    plain_init(self, conn, baseclass)
    baseclass.last_received_bytes = b""


def handle_read(self):
    base = self.baseclass
    base.last_received_bytes += self.recv(1024)
    base.last_received_data = base.last_received_bytes.decode(self.encoding, "replace")


if ".decode(" in inspect.getsource(Handler.handle_read):
    Handler.__init__ = init
    Handler.handle_read = handle_read
    print("test_ftplib: its dummy server now decodes whole transfers (python/cpython#109845)", flush=True)

if __name__ == "__main__":
    unittest.main(module=test_ftplib, argv=[sys.argv[0], *sys.argv[1:]], verbosity=1)
