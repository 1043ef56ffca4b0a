# Installing libkvtier: one shared library (libkvtier.so) that carries the client and the parts
# of common, common/resp and hashing it uses, its headers under include/kvtier, a CMake package
# (find_package(kvtier) -> kvtier::client) and a pkg-config file (kvtier.pc).
#
# In the tree everything links the static kvtier_client; the shared library exists for
# installation, so that a consumer needs one -lkvtier and no kvtier-internal archives. It is
# built by whole-archiving the static libraries, which therefore must be position-independent.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

option(KVTIER_INSTALL_CLIENT "Build libkvtier.so and install the client library" ON)
if(NOT KVTIER_INSTALL_CLIENT)
  return()
endif()

set(_kvtier_client_archives kvtier_client kvtier_resp kvtier_hashing kvtier_common)
set_target_properties(${_kvtier_client_archives} PROPERTIES POSITION_INDEPENDENT_CODE ON)

add_library(kvtier_client_shared SHARED empty.cc)
set_target_properties(kvtier_client_shared PROPERTIES
  OUTPUT_NAME kvtier
  EXPORT_NAME client
  VERSION ${PROJECT_VERSION}
  SOVERSION ${PROJECT_VERSION_MAJOR})
target_link_libraries(kvtier_client_shared
  PRIVATE "$<LINK_LIBRARY:WHOLE_ARCHIVE,${_kvtier_client_archives}>"
  PUBLIC Threads::Threads)
# kvtier_client brings the others in again through its own link interface, without the feature;
# the override makes every occurrence whole-archive.
string(REPLACE ";" "," _kvtier_archive_items "${_kvtier_client_archives}")
set_property(TARGET kvtier_client_shared PROPERTY LINK_LIBRARY_OVERRIDE
  "WHOLE_ARCHIVE,${_kvtier_archive_items}")
target_include_directories(kvtier_client_shared INTERFACE
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/kvtier>)
target_compile_features(kvtier_client_shared INTERFACE cxx_std_20)

install(TARGETS kvtier_client_shared EXPORT kvtierTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT client)

# The public headers and the headers they include, in the layout their #include lines expect.
set(_kvtier_include ${CMAKE_INSTALL_INCLUDEDIR}/kvtier)
install(FILES
    async_client.h client.h client_types.h default_url.h endpoint.h kvtier_c.h request_buffer.h
    reply_mapping.h shared_arena.h unique_fd.h
  DESTINATION ${_kvtier_include}/client COMPONENT client)
install(FILES
    ${PROJECT_SOURCE_DIR}/common/keys.h ${PROJECT_SOURCE_DIR}/common/paths.h
    ${PROJECT_SOURCE_DIR}/common/status.h
    ${PROJECT_SOURCE_DIR}/common/thread_annotations.h ${PROJECT_SOURCE_DIR}/common/types.h
  DESTINATION ${_kvtier_include}/common COMPONENT client)
install(FILES ${PROJECT_SOURCE_DIR}/common/resp/reply.h ${PROJECT_SOURCE_DIR}/common/resp/status_words.h
  DESTINATION ${_kvtier_include}/common/resp COMPONENT client)
install(FILES
    ${PROJECT_SOURCE_DIR}/hashing/block_hasher.h ${PROJECT_SOURCE_DIR}/hashing/namespace_descriptor.h
  DESTINATION ${_kvtier_include}/hashing COMPONENT client)

set(_kvtier_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/kvtier)
install(EXPORT kvtierTargets NAMESPACE kvtier:: FILE kvtierTargets.cmake
  DESTINATION ${_kvtier_cmake_dir} COMPONENT client)
configure_package_config_file(kvtierConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/kvtierConfig.cmake INSTALL_DESTINATION ${_kvtier_cmake_dir})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/kvtierConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/kvtierConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/kvtierConfigVersion.cmake DESTINATION ${_kvtier_cmake_dir}
  COMPONENT client)

# The prefix is written relative to the .pc file, so the package still works when installed with
# `cmake --install --prefix` somewhere other than CMAKE_INSTALL_PREFIX.
file(RELATIVE_PATH KVTIER_PC_PREFIX_FROM_PCFILEDIR "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
configure_file(kvtier.pc.in ${CMAKE_CURRENT_BINARY_DIR}/kvtier.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/kvtier.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
  COMPONENT client)

# `cmake --install BUILD --component client` installs just this. Install into a scratch prefix and build a C++ consumer (find_package) and a C consumer
# (pkg-config) against it.
# Only for unsanitized builds: a consumer outside the build does not link the sanitizer runtimes
# that a sanitized libkvtier needs.
if(KVTIER_BUILD_TESTS AND NOT KVTIER_SANITIZE)
  add_test(NAME client_install_consumer
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/install_test/run.sh ${CMAKE_BINARY_DIR}
            ${CMAKE_CURRENT_SOURCE_DIR}/install_test ${CMAKE_CURRENT_BINARY_DIR}/install_test)
  set_tests_properties(client_install_consumer PROPERTIES LABELS "install" TIMEOUT 300)
endif()
