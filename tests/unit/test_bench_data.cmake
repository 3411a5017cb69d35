# The data `strata bench` checks lives with the tool (tools/strata/bench_data.c): build it in.
target_sources(test_bench_data PRIVATE ${PROJECT_SOURCE_DIR}/tools/strata/bench_data.c)
target_include_directories(test_bench_data PRIVATE ${PROJECT_SOURCE_DIR}/tools)
