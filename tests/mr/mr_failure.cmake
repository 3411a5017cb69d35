# The failure tests over the UCX transport, when strata is built with it (mr_failure.c, *_ucx).
if(STRATA_HAVE_UCX)
  add_test(NAME mr_failure_ucx COMMAND mr_failure ucx)
  set_tests_properties(mr_failure_ucx PROPERTIES LABELS "mr" TIMEOUT 600)
endif()
