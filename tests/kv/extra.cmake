# KV page library: the randomized state-machine test, run much longer (label slow).
add_test(NAME test_kv_fsm_slow COMMAND test_kv_fsm --slow WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
set_tests_properties(test_kv_fsm_slow PROPERTIES LABELS slow TIMEOUT 3600 SKIP_RETURN_CODE 77)
