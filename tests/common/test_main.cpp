// main() of every kinet test binary: GoogleTest's, except that a run in
// which every TEST that ran was skipped (GTEST_SKIP: no GPU, no NIC, no
// namespaces) exits 77, which ctest reports as skipped (SKIP_RETURN_CODE),
// never as passed. A run with a failure exits 1, as gtest_main's does.
#include <gtest/gtest.h>

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  const testing::UnitTest& u = *testing::UnitTest::GetInstance();
  if (rc == 0 && u.test_to_run_count() > 0 && u.skipped_test_count() == u.test_to_run_count()) return 77;
  return rc;
}
