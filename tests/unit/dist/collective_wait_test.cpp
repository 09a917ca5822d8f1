// How a failed collective is named: from how long rankwise waited against
// the timeout it set, never from c10d's text (detail::run_collective).
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>

#include "dist/collective_wait.h"
#include "rankwise/error.h"

namespace {

using std::chrono::milliseconds;

// c10d's Work for a collective whose wait fails after `after` with `text`.
class FailingWork : public c10d::Work {
 public:
  FailingWork(milliseconds after, std::string text) : after_(after), text_(std::move(text)) {}
  bool wait(milliseconds /*timeout*/) override {
    std::this_thread::sleep_for(after_);
    throw std::runtime_error(text_);
  }

 private:
  milliseconds after_;
  std::string text_;
};

// The error run_collective throws for a wait that fails after `after` with `text`.
template <typename ExpectedError>
std::string error_of(milliseconds timeout, milliseconds after, const std::string& text,
                     const std::function<std::string()>& explain = {}) {
  try {
    rankwise::dist::run_collective(
        "rank 1/2", "all_reduce", timeout,
        [&] { return c10::make_intrusive<FailingWork>(after, text); }, explain);
  } catch (const ExpectedError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong error type: " << e.what();
    return "";
  }
  ADD_FAILURE() << "no error";
  return "";
}

}  // namespace

// A wait that failed once the timeout had passed is a timeout, whatever
// c10d's text says (its words differ between libtorch versions).
TEST(CollectiveWait, FailureAfterTheTimeoutIsATimeoutErrorWhateverItsText) {
  const auto text = error_of<rankwise::TimeoutError>(milliseconds(50), milliseconds(50),
                                                     "the operation did not complete");
  EXPECT_EQ(text,
            "rankwise: rank 1/2: all_reduce failed after a timeout of 50 ms: not every rank "
            "reached this collective. Check that every rank calls the same collectives in the "
            "same order. Original error: the operation did not complete");
}

// A failure long before the timeout is a peer's, even when c10d's text
// speaks of a timeout.
TEST(CollectiveWait, FailureBeforeTheTimeoutIsAPeerErrorWhateverItsText) {
  const auto text = error_of<rankwise::PeerError>(milliseconds(600000), milliseconds(0),
                                                  "Operation timed out!");
  EXPECT_EQ(text,
            "rankwise: rank 1/2: all_reduce failed: a peer rank probably exited or crashed; see "
            "its output. Original error: Operation timed out!");
}

// What the caller knows of the other ranks comes before c10d's text, of
// which only the first line is kept (1.13 appends a C++ stack trace).
TEST(CollectiveWait, ExplanationComesFirstAndOnlyTheFirstLineOfC10dsText) {
  const auto explain = [] { return std::string("rank 0 never entered it"); };
  EXPECT_EQ(error_of<rankwise::TimeoutError>(milliseconds(50), milliseconds(50),
                                             "Operation timed out!\nframe #0: ...", explain),
            "rankwise: rank 1/2: all_reduce failed after a timeout of 50 ms: not every rank "
            "reached this collective: rank 0 never entered it. Check that every rank calls the "
            "same collectives in the same order. Original error: Operation timed out!");
  EXPECT_EQ(error_of<rankwise::PeerError>(milliseconds(600000), milliseconds(0),
                                          "Connection closed by peer\nframe #0: ...", explain),
            "rankwise: rank 1/2: all_reduce failed: a peer rank probably exited or crashed; see "
            "its output. rank 0 never entered it. Original error: Connection closed by peer");
}

// An error from the launch itself (a bad argument) is not a collective failure.
TEST(CollectiveWait, ErrorFromTheLaunchPassesThrough) {
  EXPECT_THROW(rankwise::dist::run_collective(
                   "rank 1/2", "all_reduce", milliseconds(1000),
                   []() -> c10::intrusive_ptr<c10d::Work> { throw std::invalid_argument("bad"); }),
               std::invalid_argument);
}
