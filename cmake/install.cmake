# `cmake --install` and find_package(rankwise): the library, the launcher and
# the public headers, with exported targets rankwise::rankwise and
# rankwise::rankwise-run. A parent project that uses add_subdirectory() gets
# rankwise::rankwise as an alias instead (top-level CMakeLists.txt).
include(CMakePackageConfigHelpers)
set(RANKWISE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/rankwise)

# The installed library and launcher find libtorch where they were linked
# against it (Debian's /usr/lib, or a wheel's site-packages/torch/lib).
# INSTALL_RPATH_USE_LINK_PATH alone misses the wheel's torch/lib (TorchConfig
# links its libraries by full path): the installed rankwise-run failed with
# "libtorch_cuda.so: cannot open shared object file". So that directory is named.
get_filename_component(RANKWISE_TORCH_LIBRARY_DIR "${TORCH_LIBRARY}" DIRECTORY)
set_target_properties(rankwise rankwise-run PROPERTIES INSTALL_RPATH_USE_LINK_PATH TRUE
  INSTALL_RPATH "${RANKWISE_TORCH_LIBRARY_DIR}")
# rankwise-ckpt links the shared librankwise too: found beside bin/, in lib/.
set_target_properties(rankwise-ckpt PROPERTIES INSTALL_RPATH_USE_LINK_PATH TRUE
  INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR};${RANKWISE_TORCH_LIBRARY_DIR}")
# rankwise_fmt (cmake/torch_compat.cmake) is part of rankwise's interface:
# consumers compile log.h with the fmt rankwise was built with.
set_target_properties(rankwise_fmt PROPERTIES EXPORT_NAME fmt)

install(TARGETS rankwise rankwise_fmt rankwise-run rankwise-ckpt EXPORT rankwiseTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/rankwise DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(PROGRAMS tools/rankwise-report/rankwise_report.py DESTINATION ${CMAKE_INSTALL_BINDIR} RENAME rankwise-report)
install(EXPORT rankwiseTargets NAMESPACE rankwise:: DESTINATION ${RANKWISE_CMAKE_DIR})

# Whether the library was built with libtorch's header-only fmt (then the
# config finds no fmt package) or with a fmt package (then it must find it).
if(RANKWISE_TORCH_FMT_HEADER)
  set(RANKWISE_FMT_FROM_TORCH ON)
else()
  set(RANKWISE_FMT_FROM_TORCH OFF)
endif()
# Generated below the build tree's root, not at it: the build tree itself is
# no package (CMAKE_PREFIX_PATH=build would find a config that only works
# installed); find_package needs `cmake --install` first.
set(RANKWISE_CONFIG_STAGING ${CMAKE_CURRENT_BINARY_DIR}/for-install)
configure_package_config_file(cmake/rankwiseConfig.cmake.in
  ${RANKWISE_CONFIG_STAGING}/rankwiseConfig.cmake INSTALL_DESTINATION ${RANKWISE_CMAKE_DIR})
write_basic_package_version_file(${RANKWISE_CONFIG_STAGING}/rankwiseConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${RANKWISE_CONFIG_STAGING}/rankwiseConfig.cmake
              ${RANKWISE_CONFIG_STAGING}/rankwiseConfigVersion.cmake
              cmake/torch_link.cmake
        DESTINATION ${RANKWISE_CMAKE_DIR})
