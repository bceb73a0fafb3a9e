# The official openai client (Node) against strata serve: label model (it needs ../shared).
add_test(NAME test_server_openai COMMAND sh ${CMAKE_SOURCE_DIR}/tests/server/openai_client.sh ${CMAKE_SOURCE_DIR})
set_tests_properties(test_server_openai PROPERTIES LABELS model TIMEOUT 300 SKIP_RETURN_CODE 77
  ENVIRONMENT "STRATA_BIN=$<TARGET_FILE:strata>")

# The overload soak: test_server_load for 10 minutes instead of 2 (label slow).
add_test(NAME test_server_load_soak COMMAND test_server_load WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
set_tests_properties(test_server_load_soak PROPERTIES LABELS slow TIMEOUT 900 ENVIRONMENT "STRATA_LOAD_SECONDS=600")

# The dashboard (GET /) in headless Chromium against strata serve with the built-in model.
add_test(NAME test_server_dashboard COMMAND sh ${CMAKE_SOURCE_DIR}/tests/server/dashboard.sh ${CMAKE_SOURCE_DIR})
set_tests_properties(test_server_dashboard PROPERTIES LABELS unit TIMEOUT 120 SKIP_RETURN_CODE 77
  ENVIRONMENT "STRATA_BIN=$<TARGET_FILE:strata>")

# strata serve: a saved session survives kill -9; SIGTERM finishes an in-flight request.
add_test(NAME test_server_sessions_restart COMMAND sh ${CMAKE_SOURCE_DIR}/tests/server/sessions_restart.sh)
set_tests_properties(test_server_sessions_restart PROPERTIES LABELS unit TIMEOUT 120 SKIP_RETURN_CODE 77
  ENVIRONMENT "STRATA_BIN=$<TARGET_FILE:strata>")

# strata serve: the prefix cache survives SIGTERM and a restart; a damaged file is refused.
add_test(NAME test_server_prefix_restart COMMAND sh ${CMAKE_SOURCE_DIR}/tests/server/prefix_restart.sh)
set_tests_properties(test_server_prefix_restart PROPERTIES LABELS unit TIMEOUT 120 SKIP_RETURN_CODE 77
  ENVIRONMENT "STRATA_BIN=$<TARGET_FILE:strata>")
