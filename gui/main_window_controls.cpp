// tierlab-explorer's window, its controls (main_window.hpp): the menus, the source, head and
// allocation boxes, the view tabs, the status bar, the fields' checks (bits ladder, context
// length) and the settings they make. The job queue, the sources and the views are in
// main_window.cpp.
#include "gui/main_window.hpp"

#include <algorithm>

#include "model/io/paths.hpp"
#include "scenarios/analyses/waterfill.hpp"
#include "model/quantizers/tier_quantizer.hpp"
#include "solvers/families.hpp"
#include "solvers/problem.hpp"

#include <QAction>
#include <QApplication>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QKeyEvent>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
#include <QMenuBar>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QScrollArea>
#include <QSlider>
#include <QSpinBox>
#include <QSplitter>
#include <QStatusBar>
#include <QTabWidget>
#include <QToolButton>
#include <QVBoxLayout>
#include <qcustomplot.h>

#include <cmath>
#include <filesystem>

#include "model/base/error.hpp"
#include "scenarios/figures/figure_qt.hpp"

namespace tierlab::explorer {

namespace {

constexpr double kSliderScale = 20.0;  // slider steps per bit

const QString kRed = "background: #ffe0e0;";

// Why the bits-ladder text is not a ladder of `quantizer` (empty when it is): whole numbers
// 1..15, strictly increasing, that the quantizer accepts (RateLadder::validate).
QString bitsProblem(const QString& text, const QString& quantizer) {
  const QString valid = "valid: bit widths from 1 to 15, increasing, separated by commas (e.g. 2,4,8)";
  const QString t = text.trimmed();
  if (t.isEmpty()) return "the field is empty; " + valid;
  int previous = 0;
  QString ladder = "evict";
  for (const QString& raw : t.split(',')) {
    const QString p = raw.trimmed();
    bool ok = false;
    const int b = p.toInt(&ok);
    if (p.isEmpty()) return "'" + t + "' has an empty entry; " + valid;
    if (!ok) return "'" + t + "': '" + p + "' is not a whole number; " + valid;
    if (b < 1 || b > 15) return "'" + t + "': " + p + " is outside the valid range 1 to 15; " + valid;
    if (b <= previous) return QString("'%1': %2 does not follow %3 (the widths must increase); %4").arg(t).arg(b).arg(previous).arg(valid);
    previous = b;
    ladder += "," + quantizer + QString::number(b);
  }
  try {
    RateLadder::parse((ladder + ",exact").toStdString()).validate();
  } catch (const std::exception& e) {
    return "'" + t + "': " + QString::fromStdString(e.what());
  }
  return {};
}

QString shipped_model() {  // from any folder: model/io/paths.hpp (the current folder, $TIERLAB_DATA, the repository)
  const std::filesystem::path p = resolve_shipped("data/stories260K/stories260K.bin", {});
  return QString::fromStdString(p.empty() ? std::string("data/stories260K/stories260K.bin") : p.string());
}

}  // namespace

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
  // Named methods on the RD curve, from the registries (rd_method_choices): checking one adds
  // its entry to the field, unchecking removes it; the checks follow the field.
  rd_methods_menu_ = menuBar()->addMenu("&Methods on the RD curve");
  rd_methods_menu_->setObjectName("rd_methods_menu");
  rd_methods_menu_->setToolTipsVisible(true);
  std::string kind;
  QMenu* sub = nullptr;
  for (const RdMethodChoice& c : rd_method_choices()) {
    if (c.kind != kind) sub = rd_methods_menu_->addMenu(QString::fromStdString(c.kind + "s")), kind = c.kind;
    sub->setToolTipsVisible(true);
    QAction* a = sub->addAction(QString::fromStdString(c.name));
    a->setCheckable(true);
    a->setData(QString::fromStdString(c.text));
    a->setToolTip(QString::fromStdString(c.text + ": " + c.summary));
    connect(a, &QAction::triggered, this, [this, a](bool on) { toggleRdMethod(a->data().toString(), on); });
  }
  connect(rd_methods_menu_, &QMenu::aboutToShow, this, [this] {
    const std::vector<std::string> in = rd_method_texts(rd_methods_->text().toStdString());
    for (QAction* a : rd_methods_menu_->findChildren<QAction*>())
      if (a->isCheckable()) a->setChecked(std::find(in.begin(), in.end(), a->data().toString().toStdString()) != in.end());
  });
}

QStringList MainWindow::rdMethodChoices() const {
  QStringList out;
  for (const QAction* a : rd_methods_menu_->findChildren<QAction*>())
    if (a->isCheckable()) out << a->data().toString();
  return out;
}

void MainWindow::toggleRdMethod(const QString& text, bool on) {
  std::vector<std::string> in = rd_method_texts(rd_methods_->text().toStdString());
  const auto it = std::find(in.begin(), in.end(), text.toStdString());
  if (on && it == in.end()) in.push_back(text.toStdString());
  if (!on && it != in.end()) in.erase(it);
  QString field;
  for (const std::string& t : in) field += (field.isEmpty() ? "" : "; ") + QString::fromStdString(t);
  setRdMethods(field);
}

void MainWindow::setRdMethods(const QString& text) {
  rd_methods_->setText(text);
  rdMethodsEdited();
}

void MainWindow::rdMethodsEdited() {
  Settings s = settings();
  s.rd_methods = rd_methods_->text().toStdString();
  try {
    check_rd_methods(s);
  } catch (const std::exception& e) {  // said at the field; the RD view keeps the last good methods
    rd_methods_->setStyleSheet("QLineEdit { " + kRed + " }");
    refuseField("rd_methods", QString::fromStdString(e.what()) + " The RD view keeps '" + last_good_methods_ + "'.");
    return;
  }
  rd_methods_->setStyleSheet(QString());
  clearFieldError("rd_methods");
  if (rd_methods_->text() == last_good_methods_) return;
  last_good_methods_ = rd_methods_->text();
  dirty_[RdCurveView] = true;  // only the RD view draws them
  if (engine_ && tabs_->currentIndex() == RdCurveView) requestView(RdCurveView);
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
  scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);  // the fields narrow when the panel scrolls
  scroll->setMinimumWidth(330);
  return scroll;
}

// Source: preset or model, context length T, open a file, run the scenario (its buttons wired).
QGroupBox* MainWindow::buildSourceBox() {
  auto* src_box = new QGroupBox("Source");
  auto* sf = new QFormLayout(src_box);
  preset_ = new QComboBox;
  preset_->setObjectName("preset");
  for (const auto& n : synth_preset_names()) preset_->addItem(QString::fromStdString(n));
  preset_->addItem("stories260K (real model)");
  preset_->setPlaceholderText("(file)");  // shown when a file (trace, scenario) is the source
  auto* open_preset = new QPushButton("Open");
  auto* prow = new QHBoxLayout;
  prow->addWidget(preset_, 1);
  prow->addWidget(open_preset);
  sf->addRow("preset / model", prow);
  context_ = new IntField("tokens");
  context_->setObjectName("context");
  context_->setRange(16, 1 << 16);
  context_->setValue(1024);
  context_->setSingleStep(256);
  context_->setToolTip("Context length T (prompt tokens) of a synthetic preset or of the captured model; "
                       "press Enter to reopen the source at this length.");
  sf->addRow("context length T", context_);
  addErrorRow(sf, "context");
  auto* open_file = new QPushButton("Open file...");
  sf->addRow(open_file);
  run_button_ = new QPushButton("Run scenario");
  run_button_->setToolTip("Compute the scenario's cells and tables (the same as `tierlab run`).");
  sf->addRow(run_button_);
  connect(open_preset, &QPushButton::clicked, this, [this] {
    SourceSpec s;
    if (preset_->currentIndex() < 0) {
      showError("preset / model: a file is open; choose a preset or the model in the box, then Open.");
      return;
    }
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
  layer_ = new IntField;
  layer_->setObjectName("layer");
  head_ = new IntField;
  head_->setObjectName("kv_head");
  hf->addRow("layer l", layer_);
  addErrorRow(hf, "layer");
  hf->addRow("KV head h", head_);
  addErrorRow(hf, "kv_head");
  step_ = new IntField;
  step_->setObjectName("step");
  step_->setRange(1, 1);
  step_->setToolTip("Decode step s: the water-filling view recomputes the error of the allocation on this step's queries.");
  hf->addRow("decode step s", step_);
  addErrorRow(hf, "step");
  return head_box;
}

// Allocation: budget (spin box and slider), quantizer, bits ladder, rate kind, solver, family,
// smoothing.
QGroupBox* MainWindow::buildAllocationBox() {
  auto* alloc_box = new QGroupBox("Allocation");
  auto* af = new QFormLayout(alloc_box);
  budget_ = new NumberField("bits");
  budget_->setObjectName("budget");
  budget_->setRange(0.05, 16.0);
  budget_->setDecimals(4);  // more is refused, not rounded
  budget_->setSingleStep(0.25);
  budget_->setValue(2.0);
  budget_->setSuffix(" bits");
  budget_slider_ = new QSlider(Qt::Horizontal);
  budget_slider_->setRange(1, static_cast<int>(16 * kSliderScale));
  budget_slider_->setValue(static_cast<int>(2 * kSliderScale));
  budget_->setToolTip("Budget B in bits per key element, 0.05 to 16 (at most 4 decimals); Enter applies.");
  af->addRow("budget B", budget_);
  addErrorRow(af, "budget");
  af->addRow(budget_slider_);
  quantizer_ = new QComboBox;
  quantizer_->setObjectName("quantizer");
  // Every tier form with a bit width (model/quantizers/tier_quantizer.hpp): kivi, token and the
  // published quantizers' tiers.
  for (const TierForm& f : tier_forms())
    if (f.has_bits) quantizer_->addItem(QString::fromStdString(f.prefix + "   (" + f.form + ")"), QString::fromStdString(f.prefix));
  af->addRow("quantizer", quantizer_);
  bits_ = new QComboBox;
  bits_->setObjectName("bits");
  bits_->setEditable(true);
  bits_->setInsertPolicy(QComboBox::NoInsert);  // a refused text never joins the list
  for (const char* b : {"2,4,8", "2,4", "4,8", "2", "4", "1,2,4,8", "3,6"}) bits_->addItem(b);
  bits_->setToolTip("Bits of the finite tiers (comma-separated, each 1 to 15, increasing); the ladder always has evict and "
                    "exact (16 bits). Enter applies.");
  last_good_bits_ = bits_->currentText();
  af->addRow("bits ladder", bits_);
  addErrorRow(af, "bits");
  rate_kind_ = new QComboBox;
  rate_kind_->setObjectName("rate_kind");
  rate_kind_->addItems({"code", "total"});
  // The problem's default (solvers/problem.hpp kDefaultRateKind), as every front door takes it.
  rate_kind_->setCurrentText(QString::fromStdString(std::string(to_string(kDefaultRateKind))));
  af->addRow("budget counts", rate_kind_);
  solver_ = new QComboBox;
  solver_->setObjectName("solver");
  for (const FamilySolver fs : family_solvers()) solver_->addItem(QString::fromStdString(std::string(to_string(fs))));
  af->addRow("solver", solver_);
  family_ = new QComboBox;
  family_->setObjectName("family");
  for (const FamilyChoice f : family_choices()) {  // solvers/families.hpp, each with what it means
    const char* what = f == FamilyChoice::Mixed      ? "M: mixed (whole ladder)"
                       : f == FamilyChoice::Quantize ? "Q: quantize only"
                       : f == FamilyChoice::Evict    ? "E: evict only"
                       : f == FamilyChoice::Routed   ? "routed (best of Q, E, M)"
                                                     : nullptr;
    const QString name = QString::fromStdString(std::string(to_string(f)));
    family_->addItem(what ? QString(what) : name, name);
  }
  af->addRow("family", family_);
  smoothing_ = new QComboBox;
  smoothing_->setObjectName("smoothing");
  for (int k : {1, 3, 5, 7, 9, 15, 31}) smoothing_->addItem(k == 1 ? QString("none") : QString("avg pool k = %1").arg(k), k);
  af->addRow("smoothing", smoothing_);
  rd_methods_ = new QLineEdit(kDefaultRdMethods);
  rd_methods_->setObjectName("rd_methods");
  rd_methods_->setToolTip("Named methods drawn on the RD curve: entries separated by ';', each as `tierlab solve "
                          "--method` reads it (kivi:2, {scorer: snapkv}, {quantizer: kivi, bits: 2}); or pick them "
                          "from the menu Methods on the RD curve. Enter applies.");
  last_good_methods_ = rd_methods_->text();
  af->addRow("RD methods", rd_methods_);
  addErrorRow(af, "rd_methods");
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
    tabs_->addTab(page, view_title(v));
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
// recomputing the current view, a tab change computing its view when stale. The fields apply
// what is committed (Enter, focus left) and valid; a value from the arrows or the slider is
// in range and applied at once.
void MainWindow::connectControls() {
  connect(run_button_, &QPushButton::clicked, this, [this] { runScenario(); });
  connect(cancel_, &QToolButton::clicked, this, [this] {
    if (cancel_flag_) *cancel_flag_ = true;
    pending_.reset();
  });
  connectTyped(context_, "context length T",
               [this] { return QString("T stays %1 (type a value in range and press Enter)").arg(context_->value()); },
               [this] { reopenWithContext(); });
  connectTyped(budget_, "budget B", [this] { return "the views keep B = " + budget_->text(); }, nullptr);
  connectTyped(layer_, "layer l", [this] { return QString("the views keep layer %1").arg(layer_->value()); }, nullptr);
  connectTyped(head_, "KV head h", [this] { return QString("the views keep KV head %1").arg(head_->value()); }, nullptr);
  connectTyped(step_, "decode step s", [this] { return QString("the views keep step %1").arg(step_->value()); }, nullptr);
  connect(budget_, &QDoubleSpinBox::valueChanged, this, [this](double b) {
    if (updating_controls_) return;
    clearFieldError("budget");
    updating_controls_ = true;
    budget_slider_->setValue(static_cast<int>(std::lround(b * kSliderScale)));
    updating_controls_ = false;
    settingsChanged();
  });
  connect(budget_slider_, &QSlider::valueChanged, this, [this](int v) {
    if (updating_controls_) return;
    budget_->setValue(v / kSliderScale);  // triggers settingsChanged
  });
  for (IntField* sb : {layer_, head_, step_})
    connect(sb, &QSpinBox::valueChanged, this, [this, sb] {
      if (updating_controls_) return;
      clearFieldError(sb->objectName());
      settingsChanged();
    });
  for (QComboBox* cb : {quantizer_, rate_kind_, solver_, family_, smoothing_})
    connect(cb, &QComboBox::currentIndexChanged, this, [this] {
      if (!updating_controls_) settingsChanged();
    });
  // The bits ladder: red while the text is not a ladder; judged when committed.
  connect(bits_->lineEdit(), &QLineEdit::textEdited, this, [this](const QString& text) {
    bits_->setStyleSheet(bitsProblem(text, quantizer_->currentData().toString()).isEmpty() ? QString()
                                                                                           : "QComboBox { " + kRed + " }");
  });
  connect(bits_->lineEdit(), &QLineEdit::editingFinished, this, [this] {
    if (!updating_controls_) commitBits();
  });
  connect(bits_, &QComboBox::activated, this, [this] {
    if (!updating_controls_) commitBits();
  });
  connect(rd_methods_, &QLineEdit::editingFinished, this, [this] { rdMethodsEdited(); });
  connect(tabs_, &QTabWidget::currentChanged, this, [this](int v) {
    // The view's own text, or what is being computed: never the previous view's.
    if (v >= 0 && v < ViewCount)
      info_->setPlainText(results_[v] ? QString::fromStdString(results_[v]->info)
                                      : QString("computing the %1 view...").arg(view_title(v)));
    if (v >= 0 && v < ViewCount && dirty_[v]) requestView(v);
  });
}

template <class Field>
void MainWindow::connectTyped(Field* field, const QString& label, std::function<QString()> kept,
                              std::function<void()> on_commit) {
  connect(field, &QAbstractSpinBox::editingFinished, this, [this, field, label, kept, on_commit] {
    const std::optional<QString> typed = field->takeTyped();  // Qt has put back the last value if it was refused
    if (typed) {
      const QString why = field->problem(*typed);
      if (!why.isEmpty()) {
        refuseField(field->objectName(), label + ": " + why + "; " + kept() + ".");
        return;
      }
      clearFieldError(field->objectName());
    }
    if (on_commit) on_commit();
  });
}

QLabel* MainWindow::addErrorRow(QFormLayout* form, const QString& field) {
  auto* label = new QLabel;
  label->setObjectName(field + "_error");
  label->setWordWrap(true);
  label->setTextFormat(Qt::PlainText);
  label->setStyleSheet("QLabel { color: #b00000; }");
  label->setVisible(false);
  form->addRow(label);
  field_errors_.insert(field, label);
  return label;
}

void MainWindow::refuseField(const QString& field, const QString& message) {
  last_error_ = message;
  error_field_ = field;
  status_->setText("Refused: " + message);
  status_->setToolTip(message);
  if (QLabel* l = field_errors_.value(field)) {
    l->setText(message);
    l->setVisible(true);
  }
}

void MainWindow::clearFieldError(const QString& field) {
  if (QLabel* l = field_errors_.value(field)) {
    l->clear();
    l->setVisible(false);
  }
  if (error_field_ != field) return;
  error_field_.clear();
  last_error_.clear();
  if (status_->text().startsWith("Refused: ")) status_->clear();
}

QString MainWindow::fieldError(const QString& field) const {
  const QLabel* l = field_errors_.value(field);
  return l ? l->text() : QString();
}

QStringList MainWindow::typedFieldNames() { return {"budget", "context", "layer", "kv_head", "step", "bits", "rd_methods"}; }

bool MainWindow::typeIntoField(const QString& field, const QString& text) {
  QWidget* target = nullptr;
  QLineEdit* line = nullptr;
  if (field == "bits") target = line = bits_->lineEdit();
  else if (field == "rd_methods") target = line = rd_methods_;
  else if (auto* sb = findChild<QAbstractSpinBox*>(field)) target = sb, line = sb->findChild<QLineEdit*>();
  if (!target || !line) {
    showError("no field named '" + field + "' (" + typedFieldNames().join(", ") + ")");
    return false;
  }
  target->setFocus();
  if (auto* sb = qobject_cast<QAbstractSpinBox*>(target)) sb->selectAll();
  else line->selectAll();
  for (const QChar c : text) {
    QKeyEvent press(QEvent::KeyPress, 0, Qt::NoModifier, QString(c));
    QApplication::sendEvent(target, &press);
  }
  QKeyEvent enter(QEvent::KeyPress, Qt::Key_Return, Qt::NoModifier);
  QApplication::sendEvent(target, &enter);
  return fieldError(field).isEmpty();
}

Settings MainWindow::settings() const {
  Settings s;
  s.layer = layer_->value();
  s.kv_head = head_->value();
  s.budget = budget_->value();
  const QString kind = quantizer_->currentData().toString();
  QString ladder = "evict";
  for (const QString& b : last_good_bits_.split(',', Qt::SkipEmptyParts)) ladder += "," + kind + b.trimmed();
  ladder += ",exact";
  s.ladder = ladder.toStdString();
  s.rate_kind = parse_rate_kind(rate_kind_->currentText().toStdString());
  s.solver = parse_family_solver(solver_->currentText().toStdString());
  s.family = parse_family_choice(family_->currentData().toString().toStdString());
  s.smoothing = smoothing_->currentData().toInt();
  s.decode_step = step_->value();
  s.recompute_obs = false;
  s.rd_methods = last_good_methods_.toStdString();
  return s;
}

void MainWindow::setLadderBits(const QString& kind, const QString& bits) {
  updating_controls_ = true;
  const int i = quantizer_->findData(kind);
  if (i >= 0) quantizer_->setCurrentIndex(i);
  bits_->setCurrentText(bits);
  updating_controls_ = false;
  commitBits();
}

void MainWindow::commitBits() {
  const QString text = bits_->currentText().trimmed();
  const QString why = bitsProblem(text, quantizer_->currentData().toString());
  if (!why.isEmpty()) {  // said at the field; the views keep the last ladder
    bits_->setStyleSheet("QComboBox { " + kRed + " }");
    refuseField("bits", "bits ladder: " + why + "; the views keep " + last_good_bits_ + ".");
    return;
  }
  bits_->setStyleSheet(QString());
  clearFieldError("bits");
  if (text == last_good_bits_) return;
  last_good_bits_ = text;
  settingsChanged();
}

// A scenario (or a run folder) was opened: the live views take its rate kind, its ladder (when
// it is one quantizer's bit widths, as the fields can hold) and its water-filling budget (else
// its primary budget), so that they and the run's tables count the same bits.
void MainWindow::takeScenarioSettings() {
  const Scenario* sc = source_ ? source_->scenario() : nullptr;
  if (!sc) return;
  QStringList notes;
  updating_controls_ = true;
  rate_kind_->setCurrentText(QString::fromStdString(std::string(to_string(sc->rate_kind))));
  QString kind, bits;
  const auto& tiers = sc->ladder.tiers;
  for (std::size_t j = 1; j + 1 < tiers.size(); ++j) {
    QString k;
    for (int i = 0; i < quantizer_->count() && k.isEmpty(); ++i) {
      const QString prefix = quantizer_->itemData(i).toString();
      if (QString::fromStdString(tiers[j].name()) == prefix + QString::number(tiers[j].bits)) k = prefix;
    }
    if (k.isEmpty() || (!kind.isEmpty() && k != kind)) {
      kind.clear();
      break;
    }
    kind = k;
    bits += (bits.isEmpty() ? "" : ",") + QString::number(tiers[j].bits);
  }
  if (!kind.isEmpty()) {
    quantizer_->setCurrentIndex(quantizer_->findData(kind));
    bits_->setCurrentText(bits);
    bits_->setStyleSheet(QString());
    last_good_bits_ = bits;
  } else {
    notes << "its ladder " + QString::fromStdString(sc->ladder.name()) + " is not one quantizer's bit widths; the live views use " +
                 QString::fromStdString(settings().ladder);
  }
  double budget = sc->primary_budget;
  if (const WaterfillAnalysis* w = sc->find<WaterfillAnalysis>()) budget = w->spec.budget;
  if (budget >= budget_->minimum() && budget <= budget_->maximum()) {
    budget_->setValue(budget);
    budget_slider_->setValue(static_cast<int>(std::lround(budget * kSliderScale)));
  } else {
    notes << QString("its budget %1 is outside the field's range; B stays %2").arg(budget).arg(budget_->text());
  }
  updating_controls_ = false;
  for (const QString& f : typedFieldNames()) clearFieldError(f);
  QString said = "scenario settings: " + rate_kind_->currentText() + " bits, ladder " + QString::fromStdString(settings().ladder) +
                 ", B = " + budget_->text();
  if (!notes.isEmpty()) said += " (" + notes.join("; ") + ")";
  sticky_status_ = said;
}

}  // namespace tierlab::explorer
