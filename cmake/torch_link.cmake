# Link options that the libtorch found by find_package(Torch) needs beyond its
# own CMake files. Included by cmake/torch_compat.cmake (rankwise's build) and
# by the installed rankwiseConfig.cmake (programs that link rankwise::rankwise),
# after find_package(Torch), so both link the same way.

# The wheel's libtorch_cuda finds its CUDA and NCCL libraries through its
# RUNPATH ($ORIGIN/../../nvidia/*/lib). The linker, resolving libtorch_cuda's
# own dependencies, would look first in the rpath directories of the link
# line, which include the CUDA toolkit's lib directory: an older toolkit's
# libnccl there lacks symbols libtorch_cuda needs ("undefined reference to
# ncclCommGrow"). -rpath-link directories come first: the wheel's own.
function(rankwise_fix_torch_link)
  file(GLOB dirs LIST_DIRECTORIES true "${TORCH_INSTALL_PREFIX}/../nvidia/*/lib")
  get_target_property(options torch INTERFACE_LINK_OPTIONS)
  foreach(dir ${dirs})
    if(NOT "LINKER:-rpath-link,${dir}" IN_LIST options)  # once, however often called
      set_property(TARGET torch APPEND PROPERTY INTERFACE_LINK_OPTIONS "LINKER:-rpath-link,${dir}")
    endif()
  endforeach()
endfunction()
