// rankwise-test-nproc: 4
// The tests of test_metrics.cpp, run on 4 rank(s): the results must not
// depend on the world size.
#include "test_metrics.cpp"  // NOLINT(bugprone-suspicious-include)
