// kinet-post-rate — command line (CLI11).
#pragma once
#include "common.hpp"

namespace kinet::bench {

// Parses argv into o. Returns -1 to go on, otherwise the exit code (0 after
// --help, 2 for a bad command line, with CLI11's message on stderr).
int parse_options(int argc, char** argv, Options& o);

}  // namespace kinet::bench
