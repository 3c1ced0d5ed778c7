// Abseil command-line flags with a help that behaves like the other binaries': `--help` prints the
// program's usage message and each of its flags, with its help and default, on stdout, and exits 0.
// The system's Abseil (20220623) exits 1 after its help, so a script that runs `sweep --help` reads it as
// a failure; `-help`, `--helpfull` and `--helpshort` do the same as `--help` here, except as the value of
// a non-boolean flag written without "=" (`--label --help` labels with "--help", as Abseil reads it).
// Everything else (`--help=substring`, `--flagfile`, unknown flags, bad values) is Abseil's.
#ifndef LMFORGE_BASE_FLAGS_H_
#define LMFORGE_BASE_FLAGS_H_

#include <string>
#include <vector>

namespace lmf {

// absl::ParseCommandLine, after the help above: the positional arguments, argv[0] first. Call
// absl::SetProgramUsageMessage first.
std::vector<char*> ParseFlags(int argc, char** argv);

// What the help prints for the program `argv0`: "<name>: <usage message>", then the flags of the binary's
// own sources (not Abseil's), grouped by the file that defines them, sorted by name.
std::string FlagsHelp(const char* argv0);

}  // namespace lmf

#endif  // LMFORGE_BASE_FLAGS_H_
