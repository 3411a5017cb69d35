# The installed library (docs/install.md): `cmake --install build/release --prefix PREFIX` puts
#   PREFIX/include/strata/*.h              the public headers (#include <strata/strata.h>)
#   PREFIX/lib/libstrata.a, libstrata.so   every part in one library (the parts stay separate
#                                          archives in the build tree: the layering rule is theirs)
#   PREFIX/lib/pkgconfig/strata.pc         libstrata.so (--static: what libstrata.a needs)
#   PREFIX/lib/pkgconfig/strata-static.pc  libstrata.a and what it needs, in link order
#   PREFIX/lib/cmake/strata/               find_package(strata): strata::strata (shared),
#                                          strata::strata_static
#   PREFIX/bin/strata                      the command (strata launch runs the programs)
# Both libraries are made of the parts' own objects (compiled position-independent for this).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(strata_objects "")
foreach(part ${STRATA_PARTS})
  list(APPEND strata_objects $<TARGET_OBJECTS:strata_${part}>)
endforeach()
# The external libraries every part links (strata_part's LIBS), once each.
set(strata_deps Threads::Threads m PkgConfig::JSONC PkgConfig::HWLOC PkgConfig::OPENBLAS PkgConfig::PMIX
    PkgConfig::LIBCRYPTO DNNL::dnnl OpenMP::OpenMP_C
    ${CMAKE_DL_LIBS})
# ... and the modules strataConfig.cmake looks up for them.
set(STRATA_CONFIG_DEPS "JSONC:json-c HWLOC:hwloc OPENBLAS:openblas PMIX:pmix LIBCRYPTO:libcrypto")
if(STRATA_HAVE_UCX)
  list(APPEND strata_deps PkgConfig::UCX)
  string(APPEND STRATA_CONFIG_DEPS " UCX:ucx")
endif()

add_library(strata_shared SHARED ${strata_objects})
add_library(strata_static STATIC ${strata_objects})
foreach(t strata_shared strata_static)
  target_include_directories(${t} INTERFACE $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
endforeach()
target_link_libraries(strata_shared PRIVATE ${strata_deps})
target_link_libraries(strata_static INTERFACE ${strata_deps})
set_target_properties(strata_shared PROPERTIES OUTPUT_NAME strata EXPORT_NAME strata
                      VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
set_target_properties(strata_static PROPERTIES OUTPUT_NAME strata EXPORT_NAME strata_static)

install(TARGETS strata_shared strata_static EXPORT strataTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS strata RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
file(GLOB strata_public_headers ${PROJECT_SOURCE_DIR}/include/strata/*.h)
install(FILES ${strata_public_headers} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/strata)

set(strata_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/strata)
install(EXPORT strataTargets NAMESPACE strata:: DESTINATION ${strata_cmake_dir})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/strataConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/strataConfig.cmake
                              INSTALL_DESTINATION ${strata_cmake_dir})
# 0.x: a minor version may break the API, so only the same major.minor is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/strataConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/strataConfig.cmake ${PROJECT_BINARY_DIR}/strataConfigVersion.cmake
        DESTINATION ${strata_cmake_dir})

# pkg-config: the same dependencies, by module and by flag. The prefix is found from the file's own
# place (${pcfiledir}), so `cmake --install --prefix P` anywhere gives a working file.
file(RELATIVE_PATH STRATA_PC_UP /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
string(REGEX REPLACE "/$" "" STRATA_PC_UP "${STRATA_PC_UP}")
set(STRATA_PC_REQUIRES "json-c hwloc openblas pmix libcrypto")
if(STRATA_HAVE_UCX)
  string(APPEND STRATA_PC_REQUIRES " ucx")
endif()
# oneDNN ships a CMake package but no pkg-config module: named by flag, with its OpenMP runtime.
set(STRATA_PC_LIBS "-ldnnl -lgomp -lpthread -lm")
foreach(l ${CMAKE_DL_LIBS})
  string(APPEND STRATA_PC_LIBS " -l${l}")
endforeach()
foreach(pc strata strata-static)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/${pc}.pc.in ${PROJECT_BINARY_DIR}/${pc}.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/${pc}.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endforeach()
