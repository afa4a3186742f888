// tierlab-explorer's window (main_window.hpp): the job queue (one running, the latest waiting,
// partial results drawn while it runs), the sources, the views and their hover tooltips,
// export and screenshots. The controls are built in main_window_controls.cpp.
#include "gui/main_window.hpp"

#include <QApplication>
#include <QComboBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QElapsedTimer>
#include <QFileDialog>
#include <QLabel>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSpinBox>
#include <QStatusBar>
#include <QTabWidget>
#include <QThread>
#include <QToolButton>
#include <QToolTip>
#include <QtConcurrent/QtConcurrent>
#include <qcustomplot.h>

#include <cmath>
#include <filesystem>

#include "model/base/error.hpp"
#include "scenarios/figures/figure_qt.hpp"

namespace tierlab::explorer {

namespace {

const char* kViewNames[ViewCount] = {"waterfill", "headmap", "interior", "dominance", "staleness", "rdcurve"};
const char* kViewTitles[ViewCount] = {"Water-filling (one head)", "Layer x head map", "Interior advantage",
                                      "Dominance", "Staleness", "RD curve"};

}  // namespace

const char* view_name(int view) { return view >= 0 && view < ViewCount ? kViewNames[view] : "view"; }
const char* view_title(int view) { return view >= 0 && view < ViewCount ? kViewTitles[view] : "view"; }

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  results_.resize(ViewCount);
  dirty_.assign(ViewCount, true);
  plots_.resize(ViewCount);
  buildUi();
  updateSourceControls();
}

MainWindow::~MainWindow() {
  if (cancel_flag_) *cancel_flag_ = true;
  pending_.reset();
  future_.waitForFinished();
}

// ---------------------------------------------------------------------------------------
// The job queue

void MainWindow::submit(Job job) {
  if (running_) {
    if (cancel_flag_) *cancel_flag_ = true;  // supersede the running job
    pending_ = std::make_unique<Job>(std::move(job));
    return;
  }
  pending_ = std::make_unique<Job>(std::move(job));
  startNext();
}

void MainWindow::startNext() {
  if (running_ || !pending_) return;
  Job job = std::move(*pending_);
  pending_.reset();
  running_ = true;
  running_generation_ = ++generation_;
  cancel_flag_ = std::make_shared<std::atomic<bool>>(false);
  progress_->setValue(0);
  progress_->setVisible(!job.follow_up);
  cancel_->setVisible(!job.follow_up);
  status_->setText(job.what + "...");
  auto flag = cancel_flag_;
  const quint64 gen = running_generation_;
  QPointer<MainWindow> self(this);
  // The library's progress(done, total) (model/base/cancel.hpp): the bar, and the job's line with
  // the count ("computing the Layer x head map view: 5 of 32").
  const QString what = job.what;
  Progress progress = [self, gen, what](int done, int total) {
    QMetaObject::invokeMethod(
        qApp,
        [self, gen, what, done, total] {
          if (!self || self->running_generation_ != gen || total <= 0) return;
          self->progress_->setValue(static_cast<int>(std::clamp(1000.0 * done / total, 0.0, 1000.0)));
          self->status_->setText(QString("%1: %2 of %3").arg(what).arg(done).arg(total));
        },
        Qt::QueuedConnection);
  };
  Work work = std::move(job.work);
  future_ = QtConcurrent::run([self, work, flag, progress]() {
    UiApply apply;
    try {
      apply = work(*flag, progress);
    } catch (const Cancelled&) {
      apply = nullptr;
    } catch (const std::exception& e) {
      const QString msg = QString::fromStdString(e.what());
      apply = [self, msg] {
        if (self) self->showError(msg);
      };
    }
    QMetaObject::invokeMethod(
        qApp,
        [self, apply, flag] {
          if (!self) return;
          self->running_result_ = (*flag) ? UiApply() : apply;
          self->jobFinished();
        },
        Qt::QueuedConnection);
  });
}

void MainWindow::jobFinished() {
  running_ = false;
  UiApply apply = std::move(running_result_);
  running_result_ = nullptr;
  progress_->setVisible(false);
  cancel_->setVisible(false);
  if (apply) {
    status_->clear();
    apply();
    // A run's "finished" line outlives the view it triggers, until the next change.
    if (status_->text().isEmpty() && !sticky_status_.isEmpty()) status_->setText(sticky_status_);
  } else if (!pending_) {
    status_->setText("cancelled");
  }
  if (pending_) startNext();
  if (!running_ && !pending_) emit idle();
}

bool MainWindow::busy() const { return running_ || pending_ != nullptr; }

bool MainWindow::waitIdle(int timeout_ms) {
  QElapsedTimer t;
  t.start();
  while (busy()) {
    if (t.elapsed() > timeout_ms) return false;
    QApplication::processEvents(QEventLoop::AllEvents, 20);
    if (busy()) QThread::msleep(2);
  }
  QApplication::processEvents();
  return true;
}

void MainWindow::showError(const QString& message) {
  last_error_ = message;
  status_->setText("Error: " + message);
  status_->setToolTip(message);
  info_->setPlainText("Error: " + message);
  // No dialog: a modal box takes the focus from the field at fault, which reports its
  // value again when the focus comes back (an endless loop on every OK). The status bar
  // and the text panel say it; the field itself refuses what it can (validators, ranges).
}

QString MainWindow::statusText() const { return status_->text(); }

// ---------------------------------------------------------------------------------------
// Sources

void MainWindow::openArgument(const QString& arg) {
  try {
    openSpec(parse_source(arg.toStdString()));
  } catch (const std::exception& e) {
    showError(QString::fromStdString(e.what()));
  }
}

void MainWindow::openSpec(const SourceSpec& spec) {
  last_error_.clear();
  sticky_status_.clear();
  Job job;
  job.what = "opening " + QString::fromStdString(spec.describe());
  QPointer<MainWindow> self(this);
  const int partial_ms = partial_ms_;
  job.work = [self, spec, partial_ms](const std::atomic<bool>& cancel, const Progress& progress) -> UiApply {
    std::shared_ptr<Source> src = Source::open(spec, progress, &cancel);
    auto engine = std::make_shared<Engine>(src, Backend::Cpu);
    engine->set_partial_interval(partial_ms);
    return [self, src, engine] {
      if (self) self->onOpened(src, engine);
    };
  };
  submit(std::move(job));
}

void MainWindow::onOpened(std::shared_ptr<Source> src, std::shared_ptr<Engine> engine) {
  source_ = std::move(src);
  engine_ = std::move(engine);
  for (auto& r : results_) r.reset();
  dirty_.assign(ViewCount, true);
  updateSourceControls();
  takeScenarioSettings();
  setWindowTitle("tierlab-explorer: " + QString::fromStdString(source_->description()));  // says what is open
  status_->setText("opened " + QString::fromStdString(source_->description()) + " (backend " +
                   QString::fromStdString(engine_->backend_description()) + ")");
  requestView(tabs_->currentIndex());
}

void MainWindow::updateSourceControls() {
  updating_controls_ = true;
  if (!source_) {
    source_label_->setText("No source: open a trace, a scenario, a preset or the shipped model.");
    layer_->setRange(0, 0);
    head_->setRange(0, 0);
    step_->setRange(1, 1);
    run_button_->setEnabled(false);
  } else {
    const TraceMeta& m = source_->meta();
    QString text = QString::fromStdString(source_->description()) +
                   QString("\n%1 layers x %2 KV heads, T = %3, d = %4, S = %5")
                       .arg(m.n_layers)
                       .arg(m.n_kv_heads)
                       .arg(m.prompt_len)
                       .arg(m.head_dim)
                       .arg(m.decode_steps);
    if (const Scenario* sc = source_->scenario()) {
      QString budgets;
      for (double b : sc->budgets) budgets += (budgets.isEmpty() ? "" : ", ") + QString::number(b, 'g', 10);
      text += "\nscenario: " + QString::fromStdString(sc->ladder.name()) + ", B = " + budgets + " (" +
              QString::fromStdString(std::string(to_string(sc->rate_kind))) + " bits)";
    }
    if (source_->is_scenario())
      text += "\nrun: " + QString::fromStdString(source_->run_dir()) + (source_->has_tables() ? " (tables found)" : " (no tables yet: Run scenario)");
    source_label_->setText(text);
    layer_->setRange(0, m.n_layers - 1);
    head_->setRange(0, m.n_kv_heads - 1);
    step_->setRange(1, std::max(1, m.decode_steps));
    step_->setEnabled(m.decode_steps > 0);
    const SourceKind k = source_->spec().kind;
    context_->setEnabled(k == SourceKind::Synthetic || k == SourceKind::Model);
    context_->setValue(m.prompt_len);
    if (k == SourceKind::Trace || k == SourceKind::Scenario) {
      preset_->setCurrentIndex(-1);  // the box shows "(file)": a file is the source, not a preset
    } else if (k == SourceKind::Synthetic) {
      const SourceSpec& sp = source_->spec();
      const int i = preset_->findText(QString::fromStdString(sp.synth ? sp.synth->preset : sp.preset));
      if (i >= 0) preset_->setCurrentIndex(i);
    } else if (k == SourceKind::Model) {
      preset_->setCurrentIndex(preset_->count() - 1);
    }
    run_button_->setEnabled(source_->is_scenario());
    if (source_->is_scenario()) {
      layer_->setValue(std::min(source_->initial_layer(), m.n_layers - 1));
      head_->setValue(std::min(source_->initial_kv_head(), m.n_kv_heads - 1));
    }
  }
  updating_controls_ = false;
}

void MainWindow::reopenWithContext() {
  if (!source_) return;
  SourceSpec s = source_->spec();
  if (s.kind != SourceKind::Synthetic && s.kind != SourceKind::Model) return;
  const int T = context_->value();
  if (T == source_->meta().prompt_len) return;
  if (s.synth) {
    s.synth->prompt_len = T;
    s.synth->obs_window = std::min(s.synth->obs_window, std::max(1, T / 4));
  }
  s.context_length = T;
  openSpec(s);
}

void MainWindow::openDialog() {
  const QString path = QFileDialog::getOpenFileName(
      this, "Open a trace, a scenario or a llama2.c checkpoint", QString(),
      "tierlab sources (*.safetensors *.yaml *.yml *.bin);;Traces (*.safetensors);;Scenarios (*.yaml *.yml);;"
      "Checkpoints (*.bin);;All files (*)");
  if (!path.isEmpty()) openArgument(path);
}

void MainWindow::runScenario() {
  if (!source_ || !source_->is_scenario()) {
    showError("Run scenario: the source is not a scenario; open a scenario file (scenarios/files/*.yaml).");
    return;
  }
  std::shared_ptr<Source> src = source_;
  Job job;
  job.what = "running scenario " + QString::fromStdString(src->scenario()->name);
  QPointer<MainWindow> self(this);
  job.work = [self, src](const std::atomic<bool>& cancel, const Progress& progress) -> UiApply {
    const ScenarioRunSummary done = run_source_scenario(*src, progress, &cancel);
    return [self, done] {
      if (!self) return;
      self->dirty_.assign(ViewCount, true);
      self->updateSourceControls();
      const QString dir = QString::fromStdString(self->source_->run_dir());
      QString text = QString("scenario run finished: tables, %1 figures and summary.md in %2").arg(done.figures).arg(dir);
      for (const std::string& why : done.skipped) text += "\nfigure skipped, " + QString::fromStdString(why);
      self->status_->setText(text);
      self->sticky_status_ = text;
      self->info_->setPlainText(text + "\n(the same files as `tierlab run`: " + dir + "/tables, " + dir + "/figures, " + dir +
                                "/summary.md)");
      self->requestView(self->tabs_->currentIndex());
    };
  };
  submit(std::move(job));
}

// ---------------------------------------------------------------------------------------
// Views

void MainWindow::settingsChanged() {
  sticky_status_.clear();
  dirty_.assign(ViewCount, true);
  if (engine_) requestView(tabs_->currentIndex());
}

void MainWindow::requestView(int view) {
  if (!engine_ || view < 0 || view >= ViewCount) return;
  Settings s;
  try {
    s = settings();
    RateLadder::parse(s.ladder).validate();
  } catch (const std::exception& e) {
    showError(QString::fromStdString(e.what()));
    return;
  }
  std::shared_ptr<Engine> engine = engine_;
  QPointer<MainWindow> self(this);
  Job job;
  job.what = QString("computing the %1 view").arg(view_title(view));
  // The slow views' text says what is being computed until their numbers come: the previous
  // result's text (other settings, or another view's) never stands in for it.
  if (view != WaterfillView && tabs_->currentIndex() == view)
    info_->setPlainText(job.what + " (B = " + QString::number(s.budget) + " bits, head L" + QString::number(s.layer) +
                        ".H" + QString::number(s.kv_head) + ")...");
  job.work = [self, engine, s, view](const std::atomic<bool>& cancel, const Progress& progress) -> UiApply {
    auto r = std::make_shared<ViewResult>();
    auto wn = std::make_shared<WaterfillNumbers>();
    // Partial results (head by head, step by step) are drawn as they come, while this job is the running one.
    const std::atomic<bool>* flag = &cancel;
    const PartialView partial = [self, flag, view](const ViewResult& so_far) {
      auto copy = std::make_shared<ViewResult>(so_far);
      QMetaObject::invokeMethod(
          qApp,
          [self, flag, view, copy] {
            if (self && self->cancel_flag_.get() == flag && !flag->load()) self->drawView(view, *copy, false);
          },
          Qt::QueuedConnection);
    };
    switch (view) {
      case WaterfillView: *r = engine->waterfill(s, wn.get(), &cancel); break;
      case HeadMapView: *r = engine->head_map(s, nullptr, progress, &cancel, partial); break;
      case InteriorView: *r = engine->interior(s, progress, &cancel, partial); break;
      case DominanceView: *r = engine->dominance(s, progress, &cancel); break;
      case RdCurveView: *r = engine->rd_curve(s, progress, &cancel, partial); break;
      default: *r = engine->staleness(s, progress, &cancel, partial); break;
    }
    return [self, r, wn, view, engine, s] {
      if (!self || self->engine_ != engine) return;
      if (view == WaterfillView) self->wf_numbers_ = *wn;
      self->applyView(view, *r);
      if (view == WaterfillView && !wn->tiers.empty()) {
        // Follow-up: the recomputation on the observation queries (superseded by any request).
        Job f;
        f.what = "recomputing on the observation queries";
        f.follow_up = true;
        f.work = [self, engine, s](const std::atomic<bool>& cancel, const Progress&) -> UiApply {
          const ErrorMetrics obs = engine->obs_error(s, &cancel);
          return [self, obs, engine] {
            if (!self || self->engine_ != engine || !self->results_[WaterfillView]) return;
            self->wf_numbers_.obs = obs;
            auto& info = self->results_[WaterfillView]->info;
            const std::string key = "  surrogate prediction (obs)";
            const auto pos = info.find('\n', info.find(key));
            if (pos != std::string::npos) {
              char line[128];
              std::snprintf(line, sizeof line, "\n  recomputed, obs queries      %.4g", obs.rel_error);
              info.insert(pos, line);
            }
            if (self->tabs_->currentIndex() == WaterfillView) self->info_->setPlainText(QString::fromStdString(info));
          };
        };
        self->submit(std::move(f));
      }
    };
  };
  submit(std::move(job));
}

void MainWindow::applyView(int view, const ViewResult& r) {
  drawView(view, r, true);
  last_error_.clear();
}

void MainWindow::drawView(int view, const ViewResult& r, bool final) {
  results_[view] = std::make_unique<ViewResult>(r);  // a partial one too: its points can be hovered
  dirty_[view] = !final;
  const auto& plots = plots_[view];
  for (std::size_t k = 0; k < plots.size(); ++k) {
    if (k < r.figures.size()) {
      draw_figure(r.figures[k], *plots[k]);
      plots[k]->setVisible(true);
    } else {
      plots[k]->clearPlottables();
      plots[k]->setVisible(false);
    }
    plots[k]->replot();
  }
  if (tabs_->currentIndex() == view) info_->setPlainText(QString::fromStdString(r.info));
  emit viewDrawn(view, final);
}

QPoint tooltip_position(const QRect& window, const QPoint& cursor, const QSize& tip) {
  // Right of and below the cursor (Qt's own offset), else left of / above it; never past the
  // window's left or top edge.
  int x = cursor.x() + 2, y = cursor.y() + 16;
  if (x + tip.width() > window.x() + window.width()) x = cursor.x() - 4 - tip.width();
  if (y + tip.height() > window.y() + window.height()) y = cursor.y() - 4 - tip.height();
  x = std::max(x, window.x()), y = std::max(y, window.y());
  return {x, y};
}

void MainWindow::showTip(QWidget* over, const QPoint& pos, const QString& text) {
  const QPoint global = over->mapToGlobal(pos);
  QToolTip::showText(global, text, over);
  // Qt keeps a tip on the screen, not in the window (a tip at the window's right edge was
  // cut off there): move it inside the window.
  const QRect window(mapToGlobal(QPoint(0, 0)), size());
  for (QWidget* w : QApplication::topLevelWidgets())
    if (w->objectName() == "qtooltip_label" && w->isVisible()) w->move(tooltip_position(window, global, w->size()));
}

QString MainWindow::infoText() const { return info_->toPlainText(); }

QString MainWindow::presetShown() const { return preset_->currentIndex() < 0 ? preset_->placeholderText() : preset_->currentText(); }

const ViewResult* MainWindow::result(int view) const {
  return view >= 0 && view < ViewCount ? results_[view].get() : nullptr;
}

void MainWindow::installHover(QCustomPlot* plot, int view, int figure) {
  plot->setMouseTracking(true);
  auto nearest = [this, plot, view, figure](const QPoint& pos, double max_px) -> const HoverPoint* {
    const ViewResult* r = result(view);
    if (!r || figure >= static_cast<int>(r->hover.size())) return nullptr;
    const HoverPoint* best = nullptr;
    double bd = max_px * max_px;
    for (const HoverPoint& h : r->hover[figure]) {
      const double px = plot->xAxis->coordToPixel(h.x), py = plot->yAxis->coordToPixel(h.y);
      const double d = (px - pos.x()) * (px - pos.x()) + (py - pos.y()) * (py - pos.y());
      if (d < bd) bd = d, best = &h;
    }
    return best;
  };
  // A phase map's cells are large: any point of a cell names it.
  const double reach = view == DominanceView ? 60 : 14;
  connect(plot, &QCustomPlot::mouseMove, this, [this, plot, nearest, reach](QMouseEvent* ev) {
    const HoverPoint* h = nearest(ev->pos(), reach);
    if (h) showTip(plot, ev->pos(), QString::fromStdString(h->text));
    else QToolTip::hideText();
  });
  if (view == HeadMapView)
    connect(plot, &QCustomPlot::mousePress, this, [this, nearest](QMouseEvent* ev) {
      const HoverPoint* h = nearest(ev->pos(), 60);
      if (h) setHead(static_cast<int>(std::lround(h->y)), static_cast<int>(std::lround(h->x)));
    });
}

// ---------------------------------------------------------------------------------------
// Controls for tests and scripts

void MainWindow::setBudget(double bits) {
  const QString text = QString::number(bits, 'g', 10);
  const QString why = budget_->problem(text);
  if (!why.isEmpty()) {  // never clamped: said as a typed value is
    refuseField("budget", "budget B: " + why + "; the views keep B = " + budget_->text() + ".");
    return;
  }
  budget_->setValue(bits);
}

void MainWindow::setHead(int layer, int kv_head) {
  updating_controls_ = true;
  layer_->setValue(layer);
  head_->setValue(kv_head);
  updating_controls_ = false;
  settingsChanged();
}

void MainWindow::setCurrentView(int view) { tabs_->setCurrentIndex(view); }

void MainWindow::setSolver(const QString& name) { solver_->setCurrentText(name); }

void MainWindow::setFamily(const QString& name) {
  const int i = family_->findData(name);
  if (i >= 0) family_->setCurrentIndex(i);
}

void MainWindow::setSmoothing(int kernel) {
  const int i = smoothing_->findData(kernel);
  if (i >= 0) smoothing_->setCurrentIndex(i);
}

void MainWindow::setDecodeStep(int step) { step_->setValue(step); }

// ---------------------------------------------------------------------------------------
// Export and screenshots

QStringList MainWindow::exportView(int view, const QString& path) {
  QStringList files;
  const ViewResult* r = result(view);
  if (!r || r->figures.empty()) {
    showError(QString("export: the %1 view has nothing to export yet.").arg(view_name(view)));
    return files;
  }
  try {
    const std::filesystem::path p(path.toStdString());
    std::string ext = p.extension().string();
    for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (ext == ".csv") {
      export_figure(merged_for_csv(*r), path.toStdString());
      files << path;
      return files;
    }
    for (std::size_t k = 0; k < r->figures.size(); ++k) {
      std::string out = path.toStdString();
      if (k > 0) out = (p.parent_path() / (p.stem().string() + "-" + std::to_string(k + 1) + p.extension().string())).string();
      export_figure(r->figures[k], out);
      files << QString::fromStdString(out);
    }
    status_->setText("exported " + files.join(", "));
  } catch (const std::exception& e) {
    showError(QString::fromStdString(e.what()));
    files.clear();
  }
  return files;
}

void MainWindow::exportDialog(bool csv) {
  const int view = tabs_->currentIndex();
  const QString base = QString("explorer-%1.%2").arg(view_name(view)).arg(csv ? "csv" : "png");
  const QString filter = csv ? "CSV (*.csv)" : "PNG (*.png);;SVG (*.svg);;PDF (*.pdf)";
  const QString path = QFileDialog::getSaveFileName(this, csv ? "Export the view's data" : "Export the view", base, filter);
  if (!path.isEmpty()) exportView(view, path);
}

QStringList MainWindow::saveScreenshots(const QString& dir, bool current_only) {
  QStringList files;
  QDir().mkpath(dir);
  for (int v = current_only ? tabs_->currentIndex() : 0; v < (current_only ? tabs_->currentIndex() + 1 : ViewCount); ++v) {
    setCurrentView(v);
    waitIdle();
    QApplication::processEvents();
    const QImage img = grab().toImage();
    const QString f = QDir(dir).filePath(QString("explorer-%1.png").arg(view_name(v)));
    if (img.save(f)) files << f;
    else showError("screenshot: cannot write " + f);
  }
  return files;
}

}  // namespace tierlab::explorer
