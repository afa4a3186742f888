// tierlab-explorer's window, its controls (main_window.hpp): the menus, the source, head and
// allocation boxes, the view tabs, the status bar, the fields' checks (bits ladder, context
// length) and the settings they make. The job queue, the sources and the views are in
// main_window.cpp.
#include "gui/main_window.hpp"

#include <algorithm>

#include "model/paths.hpp"
#include "model/tier_quantizer.hpp"
#include "solvers/families.hpp"

#include <QAction>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
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
#include <QToolButton>
#include <QVBoxLayout>
#include <qcustomplot.h>

#include <cmath>
#include <filesystem>

#include "model/error.hpp"
#include "scenarios/figures/figure_qt.hpp"

namespace tierlab::explorer {

namespace {

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

// The context length field: a number outside the range can be typed, so that the field can
// refuse it with the range (contextEdited), instead of QSpinBox's silent refusal of the digit
// that would leave the range (100000 became 10000). Enter with such a value keeps the last T.
class ContextField : public QSpinBox {
 public:
  using QSpinBox::QSpinBox;
  QValidator::State validate(QString& input, int&) const override {
    const QString t = input.trimmed();
    if (t.isEmpty()) return QValidator::Intermediate;
    for (const QChar c : t)
      if (!c.isDigit()) return QValidator::Invalid;
    bool ok = false;
    const long long v = t.toLongLong(&ok);
    return ok && v >= minimum() && v <= maximum() ? QValidator::Acceptable : QValidator::Intermediate;
  }
  QLineEdit* editor() const { return lineEdit(); }
};

QString shipped_model() {  // from any folder: model/paths.hpp (the current folder, $TIERLAB_DATA, the repository)
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
    rd_methods_->setStyleSheet("QLineEdit { background: #ffe0e0; }");
    showError(QString::fromStdString(e.what()) + " The RD view keeps '" + last_good_methods_ + "'.");
    return;
  }
  rd_methods_->setStyleSheet(QString());
  if (rd_methods_->text() == last_good_methods_) return;
  last_good_methods_ = rd_methods_->text();
  last_error_.clear();
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
  context_ = new ContextField;
  context_->setObjectName("context");
  context_->setKeyboardTracking(false);  // the value is what Enter accepts, not each keystroke
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
  quantizer_->setObjectName("quantizer");
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
  rate_kind_->setObjectName("rate_kind");
  rate_kind_->addItems({"code", "total"});
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
// recomputing the current view, a tab change computing its view when stale.
void MainWindow::connectControls() {
  connect(run_button_, &QPushButton::clicked, this, [this] { runScenario(); });
  connect(context_, &QSpinBox::editingFinished, this, [this] {
    if (refused_T_.isEmpty()) {
      reopenWithContext();
      return;
    }
    const QString refused = refused_T_;  // the field goes back to the open source's T: say why
    refused_T_.clear();
    if (source_) {
      updating_controls_ = true;
      context_->setValue(source_->meta().prompt_len);
      updating_controls_ = false;
    }
    contextEdited(refused, true);
    refused_T_.clear();
  });
  connect(static_cast<ContextField*>(context_)->editor(), &QLineEdit::textEdited, this,
          [this](const QString& text) { contextEdited(text, false); });
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
  connect(rd_methods_, &QLineEdit::editingFinished, this, [this] { rdMethodsEdited(); });
  connect(tabs_, &QTabWidget::currentChanged, this, [this](int v) {
    // The view's own text, or what is being computed: never the previous view's.
    if (v >= 0 && v < ViewCount)
      info_->setPlainText(results_[v] ? QString::fromStdString(results_[v]->info)
                                      : QString("computing the %1 view...").arg(view_title(v)));
    if (v >= 0 && v < ViewCount && dirty_[v]) requestView(v);
  });
}

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
  s.rd_methods = last_good_methods_.toStdString();
  return s;
}

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

void MainWindow::contextEdited(const QString& text, bool finished) {
  bool ok = false;
  const long long T = text.trimmed().toLongLong(&ok);
  if (ok && T >= context_->minimum() && T <= context_->maximum()) {
    context_->setStyleSheet(QString());
    refused_T_.clear();
    return;
  }
  context_->setStyleSheet("QSpinBox { background: #ffe0e0; }");
  refused_T_ = text;
  // Below the range, more digits may still make it valid: said when editing ends.
  if (ok && T < context_->minimum() && !finished) return;
  showError(QString("context length T: %1 is outside the valid range %2 to %3 for this source; T stays %4 (type a "
                    "value in range and press Enter).")
                .arg(text.trimmed().isEmpty() ? QString("an empty field") : text.trimmed())
                .arg(context_->minimum())
                .arg(context_->maximum())
                .arg(context_->value()));
}

}  // namespace tierlab::explorer
