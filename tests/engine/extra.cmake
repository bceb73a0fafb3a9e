# docs/ENGINE.md's example, built against an installed copy of the library via pkg-config
# (label install, not unit: the sanitizer build's library does not link into a plain program).
add_test(NAME test_engine_install COMMAND sh ${CMAKE_SOURCE_DIR}/tests/engine/install_example.sh
         ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR})
set_tests_properties(test_engine_install PROPERTIES LABELS install TIMEOUT 300)
