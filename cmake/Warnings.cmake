# Warnings and sanitizers for every kvtier target, applied through one interface library so that
# third-party code found with find_package is not affected.
add_library(kvtier_build_flags INTERFACE)
# Designated initializers that leave defaulted members out are the house idiom for options
# structs; gcc 12 warns about them anyway.
target_compile_options(kvtier_build_flags INTERFACE -Wall -Wextra -Wpedantic -Wno-unused-parameter
  -Wno-missing-field-initializers)
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  # Lock annotations (common/thread_annotations.h) are only checked by clang.
  target_compile_options(kvtier_build_flags INTERFACE -Wthread-safety)
endif()
if(KVTIER_SANITIZE)
  string(REPLACE ";" "," _kvtier_san "${KVTIER_SANITIZE}")
  add_compile_options(-fsanitize=${_kvtier_san} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${_kvtier_san})
endif()

# kvtier_test(NAME SOURCES... [LIBS libs...] [LABELS labels...] [PREFIX prefix]) adds a GoogleTest
# binary and registers each of its tests with ctest, named PREFIX + suite.test (so a module's tests
# can be picked with `ctest -R <prefix>`).
function(kvtier_test name)
  if(NOT KVTIER_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "PREFIX" "LIBS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_UNPARSED_ARGUMENTS})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} GTest::gmock GTest::gtest_main kvtier_build_flags)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  # One label per test: gtest_discover_tests hands PROPERTIES through a generated script that
  # splits a label list into separate properties. A binary given LABELS (for example
  # "concurrency", run again under TSan) is labelled with that alone, the others "unit".
  set(label unit)
  if(ARG_LABELS)
    list(GET ARG_LABELS 0 label)
  endif()
  gtest_discover_tests(${name} TEST_PREFIX "${ARG_PREFIX}" PROPERTIES LABELS "${label}" DISCOVERY_TIMEOUT 60)
endfunction()
