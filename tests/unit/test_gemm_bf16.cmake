# A second entry with oneDNN capped below the bf16 units (ONEDNN_MAX_CPU_ISA=AVX512_CORE): the
# machine without AMX or AVX512-BF16, where --precision bf16 computes in float32.
add_test(NAME test_gemm_bf16_no_units COMMAND test_gemm_bf16)
set_tests_properties(test_gemm_bf16_no_units PROPERTIES LABELS unit TIMEOUT 120
                     ENVIRONMENT "ONEDNN_MAX_CPU_ISA=AVX512_CORE")
# The float32 products on each library whatever this machine's default (STRATA_GEMM=auto picks one):
# oneDNN's kernels, and OpenBLAS's.
add_test(NAME test_gemm_f32_onednn COMMAND test_gemm_bf16)
set_tests_properties(test_gemm_f32_onednn PROPERTIES LABELS unit TIMEOUT 120
                     ENVIRONMENT "STRATA_GEMM=onednn")
add_test(NAME test_gemm_f32_openblas COMMAND test_gemm_bf16)
set_tests_properties(test_gemm_f32_openblas PROPERTIES LABELS unit TIMEOUT 120
                     ENVIRONMENT "STRATA_GEMM=openblas")
