#pragma once
// tierlab-explorer's computation core (no Qt types): an opened source and the views the
// app shows, each built as tierlab::Figure (scenarios/figures/figure.hpp) so that what the
// window draws (draw_figure) and what it exports (export_figure) are one picture.
//
// The public header of the library tierlab_explorer_core (the tests and the benchmark include
// it): gui/source.hpp (sources: SourceSpec, parse_source, Source, run_source_scenario) and
// gui/engine.hpp (Settings, ViewResult, the Engine and its views, the caching). gui/README.md
// says which file holds what.
#include "gui/engine.hpp"
#include "gui/source.hpp"
