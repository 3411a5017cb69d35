# Two ctest entries for one binary: the tables, and the leave-one-out validations (label "heavy":
# dozens of refits, a minute in the release build, many under ASan or TSan, which leave them out;
# the arithmetic they check is the same in every build).
set(test_args quick)
add_test(NAME test_plan_validate_loo COMMAND test_plan_validate loo)
set_tests_properties(test_plan_validate_loo PROPERTIES LABELS "unit;heavy" TIMEOUT 600)
