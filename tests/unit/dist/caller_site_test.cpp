// Call sites compiled into rankwise and its tests name the same path in every
// checkout (CMakeLists.txt maps the source directory to "rankwise/"): ccache
// returns objects compiled in other checkouts, and dist::CallerSite tells
// rankwise's own lines from a user's by that prefix. Before the mapping, a
// clone at another path reported DDP's join.cpp instead of the user's loop.
#include <gtest/gtest.h>

#include <source_location>
#include <string_view>

#include "dist/caller_site.h"
#include "rankwise/dist/process_group.h"

namespace {

using rankwise::dist::CallerSite;

TEST(CallerSite, CompiledPathsDoNotNameTheCheckout) {
  const std::source_location here = std::source_location::current();
  EXPECT_EQ(std::string_view(here.file_name()), "rankwise/tests/unit/dist/caller_site_test.cpp");
  EXPECT_EQ(std::string_view(__FILE__), "rankwise/tests/unit/dist/caller_site_test.cpp");
}

TEST(CallerSite, TheOutermostCallerIsReported) {
  const std::source_location outer = std::source_location::current();
  const CallerSite first(outer);
  const CallerSite second(std::source_location::current());
  EXPECT_EQ(CallerSite::reported(std::source_location::current()).line(), outer.line());
}

// A user's own collective is reported at its own line, even inside a loop.
TEST(CallerSite, AUserLineIsNotReplacedByTheLoopSite) {
  const std::source_location loop = std::source_location::current();
  rankwise::dist::set_loop_site(loop);
  const std::source_location own = std::source_location::current();
  EXPECT_EQ(CallerSite::reported(own).line(), own.line());
  rankwise::dist::set_loop_site(std::nullopt);
}

}  // namespace
