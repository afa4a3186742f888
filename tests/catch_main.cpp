// The tests' main. Catch2 2.x wraps a failing test's name at CATCH_CONFIG_CONSOLE_WIDTH (80 in
// Debian's prebuilt Catch2WithMain) and indents the continuation to just after the name's first
// ": "; a name whose first ": " lies beyond the width aborts the reporter (an assertion in
// Catch's TextFlow) and hides the failure it was about to print. Test names here are sentences,
// some longer than 80 characters before their colon: the width is wide enough for all of them,
// and tests/test_test_names.py keeps it so.
#define CATCH_CONFIG_CONSOLE_WIDTH 200
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
