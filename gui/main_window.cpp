#include "gui/main_window.hpp"

#include "model/paths.hpp"
#include "model/tier_quantizer.hpp"
#include "solvers/families.hpp"

#include <QAction>
#include <QApplication>
#include <QComboBox>
#include <QDateTime>
#include <QDir>
#include <QDoubleSpinBox>
#include <QElapsedTimer>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QMenuBar>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QRegularExpression>
#include <QRegularExpressionValidator>
#include <QScrollArea>
#include <QSlider>
#include <QSpinBox>
#include <QSplitter>
#include <QStatusBar>
#include <QTabWidget>
#include <QThread>
#include <QToolButton>
#include <QToolTip>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrent>
#include <qcustomplot.h>

#include <cmath>
#include <filesystem>

#include "model/error.hpp"
#include "scenarios/figures/figure_qt.hpp"

namespace tierlab::explorer {

namespace {

const char* kViewNames[ViewCount] = {"waterfill", "headmap", "interior", "dominance", "staleness", "rdcurve"};
const char* kViewTitles[ViewCount] = {"Water-filling (one head)", "Layer x head map", "Interior advantage",
                                      "Dominance", "Staleness", "RD curve"};
constexpr double kSliderScale = 20.0;  // slider steps per bit

// Why the bits-ladder text is not a ladder (empty when it is): each entry an integer 1..15.
QString bitsProblem(const QString& text) {
  const QStringList parts = text.split(',');
  if (text.trimmed().isEmpty()) return "no bit width given (e.g. 2,4,8)";
  for (const QString& raw : parts) {
    const QString p = raw.trimmed();
    bool ok = false;
    const int b = p.toInt(&ok);
    if (p.isEmpty()) return "'" + text + "' has an empty entry";
    if (!ok || b < 1 || b > 15) return "'" + p + "' is not a bit width from 1 to 15";
  }
  return {};
}

QString shipped_model() {  // from any folder: model/paths.hpp (the current folder, $TIERLAB_DATA, the repository)
  const std::filesystem::path p = resolve_shipped("data/stories260K/stories260K.bin", {});
  return QString::fromStdString(p.empty() ? std::string("data/stories260K/stories260K.bin") : p.string());
}

}  // namespace

const char* view_name(int view) { return view >= 0 && view < ViewCount ? kViewNames[view] : "view"; }

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

void MainWindow::buildUi() {
  setWindowTitle("tierlab-explorer");
  buildMenus();
  QScrollArea* scroll = buildControls();
  buildViews();
  auto* split = new QSplitter;
  split->addWidget(scroll);
  split->addWidget(tabs_);
  split->setStretchFactor(1, 1);
  setCentralWidget(split);
  buildStatusBar();
  resize(1360, 860);
  connectControls();
}

// The File and Scenario menus.
void MainWindow::buildMenus() {
  QMenu* file = menuBar()->addMenu("&File");
  file->addAction("&Open trace, scenario or checkpoint...", QKeySequence::Open, this, [this] { openDialog(); });
  file->addAction("Open &run folder...", this, [this] {  // a `tierlab run` output folder (its scenario.yaml and tables)
    const QString dir = QFileDialog::getExistingDirectory(this, "Open a tierlab run folder (with scenario.yaml)");
    if (!dir.isEmpty()) openArgument(dir);
  });
  QMenu* presets = file->addMenu("Open synthetic &preset");
  for (const auto& name : synth_preset_names()) {
    const QString n = QString::fromStdString(name);
    presets->addAction(n, this, [this, n] {
      SourceSpec s;
      s.kind = SourceKind::Synthetic;
      s.preset = n.toStdString();
      s.context_length = n == "tiny" ? 0 : context_->value();
      openSpec(s);
    });
  }
  file->addAction("Open the shipped &model (stories260K)", this, [this] {
    SourceSpec s;
    s.kind = SourceKind::Model;
    s.path = shipped_model().toStdString();
    preset_->setCurrentIndex(preset_->count() - 1);  // the field's range becomes the model's (below)
    s.context_length = context_->value();
    openSpec(s);
  });
  file->addSeparator();
  file->addAction("&Export view (PNG, SVG, PDF)...", QKeySequence("Ctrl+E"), this, [this] { exportDialog(false); });
  file->addAction("Export view &data (CSV)...", QKeySequence("Ctrl+D"), this, [this] { exportDialog(true); });
  file->addSeparator();
  file->addAction("&Quit", QKeySequence::Quit, this, [this] { close(); });
  QMenu* run = menuBar()->addMenu("&Scenario");
  run->addAction("&Run the scenario (tables for the interior, phase-map and staleness views)", QKeySequence("Ctrl+R"),
                 this, [this] { runScenario(); });
}

// The controls panel: the source line, the source, head and allocation boxes, the view's
// numbers; scrollable.
QScrollArea* MainWindow::buildControls() {
  auto* panel = new QWidget;
  auto* pv = new QVBoxLayout(panel);
  source_label_ = new QLabel("no source");
  source_label_->setWordWrap(true);
  QFont bold = source_label_->font();
  bold.setBold(true);
  source_label_->setFont(bold);
  pv->addWidget(source_label_);
  pv->addWidget(buildSourceBox());
  pv->addWidget(buildHeadBox());
  pv->addWidget(buildAllocationBox());
  info_ = new QPlainTextEdit;
  info_->setReadOnly(true);
  QFont mono("DejaVu Sans Mono");
  mono.setPointSize(9);
  info_->setFont(mono);
  pv->addWidget(info_, 1);

  auto* scroll = new QScrollArea;
  scroll->setWidget(panel);
  scroll->setWidgetResizable(true);
  scroll->setMinimumWidth(330);
  return scroll;
}

// Source: preset or model, context length T, open a file, run the scenario (its buttons wired).
QGroupBox* MainWindow::buildSourceBox() {
  auto* src_box = new QGroupBox("Source");
  auto* sf = new QFormLayout(src_box);
  preset_ = new QComboBox;
  for (const auto& n : synth_preset_names()) preset_->addItem(QString::fromStdString(n));
  preset_->addItem("stories260K (real model)");
  auto* open_preset = new QPushButton("Open");
  auto* prow = new QHBoxLayout;
  prow->addWidget(preset_, 1);
  prow->addWidget(open_preset);
  sf->addRow("preset / model", prow);
  context_ = new QSpinBox;
  context_->setRange(16, 1 << 16);
  context_->setValue(1024);
  context_->setSingleStep(256);
  context_->setToolTip("Context length T (prompt tokens) of a synthetic preset or of the captured model; "
                       "press Enter to reopen the source at this length.");
  sf->addRow("context length T", context_);
  auto* open_file = new QPushButton("Open file...");
  sf->addRow(open_file);
  run_button_ = new QPushButton("Run scenario");
  run_button_->setToolTip("Compute the scenario's cells and tables (the same as `tierlab run`).");
  sf->addRow(run_button_);
  connect(open_preset, &QPushButton::clicked, this, [this] {
    SourceSpec s;
    if (preset_->currentIndex() == preset_->count() - 1) {
      s.kind = SourceKind::Model;
      s.path = shipped_model().toStdString();
      s.context_length = context_->value();  // within the model's limit: the field's range
    } else {
      s.kind = SourceKind::Synthetic;
      s.preset = preset_->currentText().toStdString();
      s.context_length = context_->value();
    }
    openSpec(s);
  });
  connect(open_file, &QPushButton::clicked, this, [this] { openDialog(); });
  // The context field accepts only what the chosen source can open: the model's seq_len
  // minus its decode steps for stories260K, up to 65,536 for a synthetic preset.
  connect(preset_, &QComboBox::currentIndexChanged, this, [this](int i) {
    int limit = 1 << 16;
    if (i == preset_->count() - 1) {
      try {
        limit = model_context_limit(shipped_model().toStdString());
      } catch (const std::exception& e) {
        showError(QString::fromStdString(e.what()));
      }
    }
    context_->setMaximum(limit);
    context_->setToolTip(QString("Context length T (prompt tokens), %1 to %2 for this source; press Enter to reopen the "
                                 "source at this length.").arg(context_->minimum()).arg(limit));
  });
  return src_box;
}

// Head: layer, KV head, decode step.
QGroupBox* MainWindow::buildHeadBox() {
  auto* head_box = new QGroupBox("Head");
  auto* hf = new QFormLayout(head_box);
  layer_ = new QSpinBox;
  head_ = new QSpinBox;
  hf->addRow("layer l", layer_);
  hf->addRow("KV head h", head_);
  step_ = new QSpinBox;
  step_->setRange(1, 1);
  step_->setToolTip("Decode step s: the water-filling view recomputes the error of the allocation on this step's queries.");
  hf->addRow("decode step s", step_);
  return head_box;
}

// Allocation: budget (spin box and slider), quantizer, bits ladder, rate kind, solver, family,
// smoothing.
QGroupBox* MainWindow::buildAllocationBox() {
  auto* alloc_box = new QGroupBox("Allocation");
  auto* af = new QFormLayout(alloc_box);
  budget_ = new QDoubleSpinBox;
  budget_->setRange(0.05, 16.0);
  budget_->setDecimals(2);
  budget_->setSingleStep(0.25);
  budget_->setValue(2.0);
  budget_->setSuffix(" bits");
  budget_slider_ = new QSlider(Qt::Horizontal);
  budget_slider_->setRange(1, static_cast<int>(16 * kSliderScale));
  budget_slider_->setValue(static_cast<int>(2 * kSliderScale));
  af->addRow("budget B", budget_);
  af->addRow(budget_slider_);
  quantizer_ = new QComboBox;
  // Every tier form with a bit width (model/tier_quantizer.hpp): kivi, token and the
  // published quantizers' tiers.
  for (const TierForm& f : tier_forms())
    if (f.has_bits) quantizer_->addItem(QString::fromStdString(f.prefix + "   (" + f.form + ")"), QString::fromStdString(f.prefix));
  af->addRow("quantizer", quantizer_);
  bits_ = new QComboBox;
  bits_->setEditable(true);
  for (const char* b : {"2,4,8", "2,4", "4,8", "2", "4", "1,2,4,8", "3,6"}) bits_->addItem(b);
  bits_->setToolTip("Bits of the finite tiers (comma-separated, each 1 to 15); the ladder always has evict and exact (16 bits).");
  // Digits and commas only: a letter is refused as it is typed.
  bits_->setValidator(new QRegularExpressionValidator(QRegularExpression(R"(\s*\d{0,2}(\s*,\s*\d{0,2})*\s*)"), bits_));
  last_good_bits_ = bits_->currentText();
  af->addRow("bits ladder", bits_);
  rate_kind_ = new QComboBox;
  rate_kind_->addItems({"code", "total"});
  af->addRow("budget counts", rate_kind_);
  solver_ = new QComboBox;
  for (const FamilySolver fs : family_solvers()) solver_->addItem(QString::fromStdString(std::string(to_string(fs))));
  af->addRow("solver", solver_);
  family_ = new QComboBox;
  family_->addItem("M: mixed (whole ladder)", "mixed");
  family_->addItem("Q: quantize only", "quantize");
  family_->addItem("E: evict only", "evict");
  family_->addItem("routed (best of Q, E, M)", "routed");
  af->addRow("family", family_);
  smoothing_ = new QComboBox;
  for (int k : {1, 3, 5, 7, 9, 15, 31}) smoothing_->addItem(k == 1 ? QString("none") : QString("avg pool k = %1").arg(k), k);
  af->addRow("smoothing", smoothing_);
  return alloc_box;
}

// The view tabs, one plot per figure (two for water-filling, interior, staleness and the RD
// curve: the head and the model), each with hover.
void MainWindow::buildViews() {
  tabs_ = new QTabWidget;
  for (int v = 0; v < ViewCount; ++v) {
    auto* page = new QWidget;
    auto* lay = new QVBoxLayout(page);
    lay->setContentsMargins(2, 2, 2, 2);
    const int n = (v == WaterfillView || v == InteriorView || v == StalenessView || v == RdCurveView) ? 2 : 1;
    for (int k = 0; k < n; ++k) {
      auto* plot = new QCustomPlot;
      plot->setMinimumHeight(220);
      plot->setNotAntialiasedElements(QCP::aeScatters);
      plot->setPlottingHint(QCP::phFastPolylines, true);
      lay->addWidget(plot, k == 0 ? 3 : 2);
      plots_[v].push_back(plot);
      installHover(plot, v, k);
    }
    tabs_->addTab(page, kViewTitles[v]);
  }
}

// The status bar: the status line, the progress bar and the cancel button.
void MainWindow::buildStatusBar() {
  status_ = new QLabel;
  status_->setTextFormat(Qt::PlainText);  // messages name methods like kivi<b>: never rich text
  progress_ = new QProgressBar;
  progress_->setRange(0, 1000);
  progress_->setMaximumWidth(220);
  progress_->setVisible(false);
  cancel_ = new QToolButton;
  cancel_->setText("Cancel");
  cancel_->setVisible(false);
  statusBar()->addWidget(status_, 1);
  statusBar()->addPermanentWidget(progress_);
  statusBar()->addPermanentWidget(cancel_);
}

// The controls' signals: cancel, the budget's spin box and slider kept in step, every setting
// recomputing the current view, a tab change computing its view when stale.
void MainWindow::connectControls() {
  connect(run_button_, &QPushButton::clicked, this, [this] { runScenario(); });
  connect(context_, &QSpinBox::editingFinished, this, [this] { reopenWithContext(); });
  connect(cancel_, &QToolButton::clicked, this, [this] {
    if (cancel_flag_) *cancel_flag_ = true;
    pending_.reset();
  });
  connect(budget_, &QDoubleSpinBox::valueChanged, this, [this](double b) {
    if (updating_controls_) return;
    updating_controls_ = true;
    budget_slider_->setValue(static_cast<int>(std::lround(b * kSliderScale)));
    updating_controls_ = false;
    settingsChanged();
  });
  connect(budget_slider_, &QSlider::valueChanged, this, [this](int v) {
    if (updating_controls_) return;
    budget_->setValue(v / kSliderScale);  // triggers settingsChanged
  });
  for (QSpinBox* sb : {layer_, head_, step_})
    connect(sb, &QSpinBox::valueChanged, this, [this] {
      if (!updating_controls_) settingsChanged();
    });
  for (QComboBox* cb : {quantizer_, rate_kind_, solver_, family_, smoothing_})
    connect(cb, &QComboBox::currentIndexChanged, this, [this] {
      if (!updating_controls_) settingsChanged();
    });
  connect(bits_, &QComboBox::currentTextChanged, this, [this] {
    if (!updating_controls_) bitsEdited();
  });
  connect(tabs_, &QTabWidget::currentChanged, this, [this](int v) {
    if (v >= 0 && v < ViewCount && results_[v]) info_->setPlainText(QString::fromStdString(results_[v]->info));
    if (v >= 0 && v < ViewCount && dirty_[v]) requestView(v);
  });
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
  Progress progress = [self, gen](double f, const std::string& what) {
    const QString w = QString::fromStdString(what);
    QMetaObject::invokeMethod(
        qApp,
        [self, gen, f, w] {
          if (!self || self->running_generation_ != gen) return;
          self->progress_->setValue(static_cast<int>(std::clamp(f, 0.0, 1.0) * 1000));
          self->status_->setText(w);
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
  job.work = [self, spec](const std::atomic<bool>& cancel, const Progress& progress) -> UiApply {
    std::shared_ptr<Source> src = Source::open(spec, progress, &cancel);
    auto engine = std::make_shared<Engine>(src, Backend::Cpu);
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
    if (k == SourceKind::Scenario) {  // the preset of the scenario's cell, when synthetic
      for (int i = 0; i + 1 < preset_->count(); ++i)
        if (source_->cell_id().rfind(preset_->itemText(i).toStdString() + "-", 0) == 0) preset_->setCurrentIndex(i);
    }
    if (k == SourceKind::Synthetic) {
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
      const QString text = QString("scenario run finished: tables, %1 figures and summary.md in %2").arg(done.figures).arg(dir);
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

Settings MainWindow::settings() const {
  Settings s;
  s.layer = layer_->value();
  s.kv_head = head_->value();
  s.budget = budget_->value();
  const QString kind = quantizer_->currentData().toString();
  QString ladder = "evict";
  const QString bits = bitsProblem(bits_->currentText()).isEmpty() ? bits_->currentText() : last_good_bits_;
  for (const QString& b : bits.split(',', Qt::SkipEmptyParts)) ladder += "," + kind + b.trimmed();
  ladder += ",exact";
  s.ladder = ladder.toStdString();
  s.rate_kind = parse_rate_kind(rate_kind_->currentText().toStdString());
  s.solver = parse_family_solver(solver_->currentText().toStdString());
  s.family = parse_family_choice(family_->currentData().toString().toStdString());
  s.smoothing = smoothing_->currentData().toInt();
  s.decode_step = step_->value();
  s.recompute_obs = false;
  return s;
}

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
  job.what = QString("computing the %1 view").arg(kViewTitles[view]);
  job.work = [self, engine, s, view](const std::atomic<bool>& cancel, const Progress& progress) -> UiApply {
    auto r = std::make_shared<ViewResult>();
    auto wn = std::make_shared<WaterfillNumbers>();
    switch (view) {
      case WaterfillView: *r = engine->waterfill(s, wn.get(), &cancel); break;
      case HeadMapView: *r = engine->head_map(s, nullptr, progress, &cancel); break;
      case InteriorView: *r = engine->interior(s, progress, &cancel); break;
      case DominanceView: *r = engine->dominance(s, progress, &cancel); break;
      case RdCurveView: *r = engine->rd_curve(s, progress, &cancel); break;
      default: *r = engine->staleness(s, progress, &cancel); break;
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
  results_[view] = std::make_unique<ViewResult>(r);
  dirty_[view] = false;
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
  last_error_.clear();
}

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
  connect(plot, &QCustomPlot::mouseMove, this, [plot, nearest](QMouseEvent* ev) {
    const HoverPoint* h = nearest(ev->pos(), 14);
    if (h) QToolTip::showText(plot->mapToGlobal(ev->pos()), QString::fromStdString(h->text), plot);
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

void MainWindow::setBudget(double bits) { budget_->setValue(bits); }

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

void MainWindow::setLadderBits(const QString& kind, const QString& bits) {
  updating_controls_ = true;
  const int i = quantizer_->findData(kind);
  if (i >= 0) quantizer_->setCurrentIndex(i);
  bits_->setCurrentText(bits);
  updating_controls_ = false;
  bitsEdited();
}

void MainWindow::bitsEdited() {
  const QString why = bitsProblem(bits_->currentText());
  if (!why.isEmpty()) {  // incomplete or out of range: said at the field; the views keep the last ladder
    bits_->setStyleSheet("QComboBox { background: #ffe0e0; }");
    showError("bits ladder: " + why + "; the views keep " + last_good_bits_ + ".");
    return;
  }
  bits_->setStyleSheet(QString());
  last_good_bits_ = bits_->currentText();
  last_error_.clear();
  settingsChanged();
}

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

QStringList MainWindow::saveScreenshots(const QString& dir) {
  QStringList files;
  QDir().mkpath(dir);
  for (int v = 0; v < ViewCount; ++v) {
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
