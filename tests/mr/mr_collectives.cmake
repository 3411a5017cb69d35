# Two ctest entries for one binary: the small matrix, and the >= 16 MiB cases (label "large", which
# the TSan run leaves out: there they take many minutes and check nothing the ASan run does not).
set(test_args small)
set(test_timeout 900)
add_test(NAME mr_collectives_large COMMAND mr_collectives large)
set_tests_properties(mr_collectives_large PROPERTIES LABELS "mr;large" TIMEOUT 900)
# The same matrix on strata_mem_alloc memory: the direct algorithms.
add_test(NAME mr_collectives_mem COMMAND mr_collectives small mem)
set_tests_properties(mr_collectives_mem PROPERTIES LABELS "mr" TIMEOUT 900)
# The same matrix on malloc memory that the windows adopt from 4 KiB up (STRATA_SHM_ADOPT): the
# direct algorithms on the user's own buffers, their partial end pages through CMA. (From 1 MiB,
# the default, mr_collectives_large runs them too, with non-temporal stores out of place.)
add_test(NAME mr_collectives_adopt COMMAND mr_collectives small)
set_tests_properties(mr_collectives_adopt PROPERTIES LABELS "mr" TIMEOUT 900
                     ENVIRONMENT "STRATA_SHM_ADOPT=4K")
# The matrix over the UCX transport (STRATA_COMM_TRANSPORT=ucx), when strata is built with it: over
# UCX's tcp with small fragments (so every message of 64 KiB and more is several fragments, fetched
# by rendezvous and reduced one by one), and over its shared memory, the large cases too.
if(STRATA_HAVE_UCX)
  add_test(NAME mr_collectives_ucx_tcp COMMAND mr_collectives small)
  set_tests_properties(mr_collectives_ucx_tcp PROPERTIES LABELS "mr" TIMEOUT 900 ENVIRONMENT
                       "STRATA_COMM_TRANSPORT=ucx;UCX_TLS=tcp;STRATA_UCX_FRAG_BYTES=64K")
  add_test(NAME mr_collectives_ucx_sm COMMAND mr_collectives small)
  set_tests_properties(mr_collectives_ucx_sm PROPERTIES LABELS "mr" TIMEOUT 900 ENVIRONMENT
                       "STRATA_COMM_TRANSPORT=ucx;UCX_TLS=sm")
  add_test(NAME mr_collectives_ucx_sm_large COMMAND mr_collectives large)
  set_tests_properties(mr_collectives_ucx_sm_large PROPERTIES LABELS "mr;large" TIMEOUT 900
                       ENVIRONMENT "STRATA_COMM_TRANSPORT=ucx;UCX_TLS=sm")
endif()
# The same matrix over tcp with four connections per peer and slices down to 64 bytes, so that even
# the small counts are striped (reductions then combine each lane's slice as it arrives).
add_test(NAME mr_collectives_tcp4 COMMAND mr_collectives small)
set_tests_properties(mr_collectives_tcp4 PROPERTIES LABELS "mr" TIMEOUT 900 ENVIRONMENT
                     "STRATA_COMM_TRANSPORT=tcp;STRATA_TCP_CONNS=4;STRATA_TCP_STRIPE_MIN=64")
add_test(NAME mr_collectives_tcp4_large COMMAND mr_collectives large)
set_tests_properties(mr_collectives_tcp4_large PROPERTIES LABELS "mr;large" TIMEOUT 900 ENVIRONMENT
                     "STRATA_COMM_TRANSPORT=tcp;STRATA_TCP_CONNS=4")
