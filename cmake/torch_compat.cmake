# What differs between the libtorch builds rankwise supports (Debian's 1.13,
# PyPI's torch 2.x wheel) as far as the build is concerned, found by looking
# at the libtorch that find_package(Torch) found. The C++ side of the same
# differences is in src/detail/compat/.

# fmt: libtorch 2.x installs its own fmt headers (fmt 12 in torch 2.15) in
# its include directory, which comes before /usr/include; compiled against
# them, Debian's libfmt (fmt 9) would not link. So with such a libtorch, fmt
# is header-only from libtorch's copy; otherwise Debian's libfmt.
find_file(RANKWISE_TORCH_FMT_HEADER fmt/base.h PATHS ${TORCH_INCLUDE_DIRS} NO_DEFAULT_PATH)
add_library(rankwise_fmt INTERFACE)
if(RANKWISE_TORCH_FMT_HEADER)
  message(STATUS "rankwise: fmt header-only, from libtorch's ${RANKWISE_TORCH_FMT_HEADER}")
  target_compile_definitions(rankwise_fmt INTERFACE FMT_HEADER_ONLY=1)
  target_link_libraries(rankwise_fmt INTERFACE torch)
else()
  find_package(fmt REQUIRED)
  target_link_libraries(rankwise_fmt INTERFACE fmt::fmt)
endif()

# c10d's reducer.hpp includes torch/csrc/distributed/autograd/context/context.h,
# which Debian's libtorch-dev omits: then src/detail/compat/missing supplies a stub.
find_file(RANKWISE_TORCH_AUTOGRAD_CONTEXT_HEADER torch/csrc/distributed/autograd/context/context.h
          PATHS ${TORCH_INCLUDE_DIRS} NO_DEFAULT_PATH)
if(RANKWISE_TORCH_AUTOGRAD_CONTEXT_HEADER)
  set(RANKWISE_TORCH_LACKS_AUTOGRAD_CONTEXT OFF)
else()
  set(RANKWISE_TORCH_LACKS_AUTOGRAD_CONTEXT ON)
endif()

include(${CMAKE_CURRENT_LIST_DIR}/torch_link.cmake)
rankwise_fix_torch_link()
