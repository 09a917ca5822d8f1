# What differs between the libtorch builds rankwise supports (Debian's 1.13,
# PyPI's torch 2.x wheel) as far as the build is concerned, found by looking
# at the libtorch that find_package(Torch) found. The C++ side of the same
# differences is in src/detail/compat/.

# c10d's reducer.hpp includes torch/csrc/distributed/autograd/context/context.h,
# which Debian's libtorch-dev omits: then src/detail/compat/missing supplies a stub.
find_file(RANKWISE_TORCH_AUTOGRAD_CONTEXT_HEADER torch/csrc/distributed/autograd/context/context.h
          PATHS ${TORCH_INCLUDE_DIRS} NO_DEFAULT_PATH)
if(RANKWISE_TORCH_AUTOGRAD_CONTEXT_HEADER)
  set(RANKWISE_TORCH_LACKS_AUTOGRAD_CONTEXT OFF)
else()
  set(RANKWISE_TORCH_LACKS_AUTOGRAD_CONTEXT ON)
endif()
