"""Runs one test module for ctest: exit 0 when its tests passed, 1 when one
failed, 77 (ctest's SKIP_RETURN_CODE) when every test in it was skipped, so
a suite that could not run here shows as skipped, never as passed.

    python3 run.py test_module
"""
import sys
import unittest

if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: run.py TEST_MODULE")
    suite = unittest.defaultTestLoader.loadTestsFromName(sys.argv[1])
    result = unittest.TextTestRunner(verbosity=2, stream=sys.stdout).run(suite)
    if not result.wasSuccessful():
        sys.exit(1)
    if result.testsRun == 0 or len(result.skipped) == result.testsRun:
        print(f"{sys.argv[1]}: every test skipped")
        sys.exit(77)
    sys.exit(0)
