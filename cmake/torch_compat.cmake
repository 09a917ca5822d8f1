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

# NCCL: a libtorch built with CUDA has the torch_cuda target, which defines
# USE_C10D_NCCL (the guard of ProcessGroupNCCL.hpp) for its users. Then
# RANKWISE_TORCH_NCCL is defined for src/detail/compat/nccl_group.cpp, which
# alone includes that header. Its ProcessGroupNCCL::Options holds an
# ncclConfig_t, so nccl.h must be the one libtorch was built with: the wheel's
# own (nvidia/nccl/include), before the CUDA toolkit's, which may be another
# NCCL version.
set(RANKWISE_TORCH_NCCL OFF)
if(TARGET torch_cuda)
  find_file(RANKWISE_TORCH_NCCL_HEADER torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp
            PATHS ${TORCH_INCLUDE_DIRS} NO_DEFAULT_PATH)
  if(RANKWISE_TORCH_NCCL_HEADER)
    set(RANKWISE_TORCH_NCCL ON)
  endif()
endif()
find_path(RANKWISE_TORCH_NCCL_INCLUDE_DIR nccl.h PATHS "${TORCH_INSTALL_PREFIX}/../nvidia/nccl/include"
          NO_DEFAULT_PATH)
message(STATUS "rankwise: NCCL backend ${RANKWISE_TORCH_NCCL} (nccl.h: ${RANKWISE_TORCH_NCCL_INCLUDE_DIR})")
