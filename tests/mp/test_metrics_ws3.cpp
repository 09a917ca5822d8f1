// rankwise-test-nproc: 3
// The tests of test_metrics.cpp, run on 3 rank(s): the results must not
// depend on the world size.
#include "test_metrics.cpp"  // NOLINT(bugprone-suspicious-include)
