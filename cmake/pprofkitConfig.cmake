# pprofkitConfig.cmake - find_package(pprofkit CONFIG): the imported targets
# pprofkit::pprofkit (the shared library) and pprofkit::pprofkit_static (the archive,
# which brings its dependencies: zlib, libzstd, libxxhash, libcurl through pkg-config,
# threads and libm). Installed with the library; relocatable.
include(CMakeFindDependencyMacro)
find_dependency(PkgConfig)
find_dependency(Threads)
foreach(dep ZLIB:zlib ZSTD:libzstd XXHASH:libxxhash CURL:libcurl)
  string(REPLACE ":" ";" dep "${dep}")
  list(GET dep 0 prefix)
  list(GET dep 1 module)
  if(NOT TARGET PkgConfig::${prefix})
    pkg_check_modules(${prefix} REQUIRED QUIET IMPORTED_TARGET ${module})
  endif()
endforeach()
include("${CMAKE_CURRENT_LIST_DIR}/pprofkitTargets.cmake")
