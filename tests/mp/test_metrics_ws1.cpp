// rankwise-test-nproc: 1
// The tests of test_metrics.cpp, run on 1 rank(s): the results must not
// depend on the world size.
#include "test_metrics.cpp"  // NOLINT(bugprone-suspicious-include)
