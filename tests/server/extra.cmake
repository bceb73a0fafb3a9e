# The official openai client (Node) against strata serve: label model (it needs ../shared).
add_test(NAME test_server_openai COMMAND sh ${CMAKE_SOURCE_DIR}/tests/server/openai_client.sh ${CMAKE_SOURCE_DIR})
set_tests_properties(test_server_openai PROPERTIES LABELS model TIMEOUT 300 SKIP_RETURN_CODE 77
  ENVIRONMENT "STRATA_BIN=$<TARGET_FILE:strata>")

# strata serve: a saved session survives kill -9; SIGTERM finishes an in-flight request.
add_test(NAME test_server_sessions_restart COMMAND sh ${CMAKE_SOURCE_DIR}/tests/server/sessions_restart.sh)
set_tests_properties(test_server_sessions_restart PROPERTIES LABELS unit TIMEOUT 120 SKIP_RETURN_CODE 77
  ENVIRONMENT "STRATA_BIN=$<TARGET_FILE:strata>")
