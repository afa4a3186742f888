#pragma once
// tierlab-explorer's window: the controls a teacher needs (source, head, budget, quantizer and
// bits ladder, rate kind, solver, family, smoothing kernel, context length, decode step), six
// views as tabs (water-filling, layer x head map, interior advantage, dominance, staleness, RD curve),
// export of the current view (PNG/SVG/PDF through export_figure, CSV of its data) and a
// status bar with progress (the library's Progress, model/base/cancel.hpp: done of total).
//
// Every computation runs off the UI thread (QtConcurrent) through one queue of jobs: a new
// request sets the running job's cancel flag and replaces any request still waiting, so only
// the latest request is computed next; results are applied on the UI thread only if their
// generation is still current, and the slow views' partial results (PartialView, head by
// head) are drawn as they come while their job is the running one. Errors of a job
// (unreadable trace, bad scenario, bad preset) are shown in the status bar and in the view's
// text, never in a dialog and never thrown out of the event loop. A field's value (budget,
// context length, layer, KV head, decode step, bits ladder, RD methods) is applied only when
// it is committed (Enter or focus left) and valid; a refused one is named, with the valid
// range, beside the field and in the status bar, and the views keep the last valid value
// (gui/typed_field.hpp). Built in main_window.cpp (the queue, sources,
// views, export) and main_window_controls.cpp (menus, boxes, fields).
#include <QFuture>
#include <QHash>
#include <QMainWindow>
#include <QPoint>
#include <QRect>
#include <QSize>
#include <QString>
#include <QStringList>

#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "gui/explorer_core.hpp"
#include "gui/typed_field.hpp"

class QCustomPlot;
class QComboBox;
class QDoubleSpinBox;
class QFormLayout;
class QGroupBox;
class QSpinBox;
class QSlider;
class QLabel;
class QLineEdit;
class QMenu;
class QPlainTextEdit;
class QProgressBar;
class QPushButton;
class QScrollArea;
class QTabWidget;
class QToolButton;

namespace tierlab::explorer {

enum View { WaterfillView = 0, HeadMapView, InteriorView, DominanceView, StalenessView, RdCurveView, ViewCount };
const char* view_name(int view);   // "waterfill", "headmap", "interior", "dominance", "staleness", "rdcurve"
const char* view_title(int view);  // the tab's title: "Water-filling (one head)", ...

// Where a tooltip of size `tip` for the cursor at `cursor` goes (its top-left corner, global
// coordinates) so that it lies inside `window` (global): right of and below the cursor when
// it fits, else left of / above it.
QPoint tooltip_position(const QRect& window, const QPoint& cursor, const QSize& tip);

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  // Opening a source (asynchronous; errors go to the status bar and lastError()).
  void openSpec(const SourceSpec&);
  void openArgument(const QString& arg);  // parse_source; a parse error is shown the same way

  // Controls, for tests and scripted screenshots (each triggers the usual recomputation).
  void setBudget(double bits);
  void setHead(int layer, int kv_head);
  void setCurrentView(int view);
  void setSolver(const QString& name);
  void setFamily(const QString& name);
  void setSmoothing(int kernel);
  void setDecodeStep(int step);
  void setLadderBits(const QString& kind, const QString& bits);  // "kivi", "2,4,8"; refused as typed text is
  // Types `text` into a field as a user does (its text selected, key by key, then Enter) and
  // returns whether the field took it; a refusal is fieldError(field) and lastError(). The
  // fields: typedFieldNames() (budget, context, layer, kv_head, step, bits, rd_methods).
  bool typeIntoField(const QString& field, const QString& text);
  static QStringList typedFieldNames();
  QString fieldError(const QString& field) const;  // the sentence shown beside the field ("" when none)
  // The RD view's named methods (the field's text, entries separated by ';'); a text the
  // library refuses is refused at the field (status bar) and the view keeps the last good one.
  void setRdMethods(const QString& text);
  QStringList rdMethodChoices() const;  // the entries the menu "Methods on the RD curve" offers

  // How often the slow views hand over partial results, in ms (Engine::set_partial_interval;
  // for the sources opened from now on).
  void setPartialInterval(int ms) { partial_ms_ = ms; }

  // Runs the open scenario into its run folder (asynchronous, with progress; cancellable).
  void runScenario();

  // Processes events until no job is running or waiting (false on timeout).
  bool waitIdle(int timeout_ms = 120000);
  bool busy() const;

  // The last result applied to a view (nullptr when none yet).
  const ViewResult* result(int view) const;
  const WaterfillNumbers& waterfillNumbers() const { return wf_numbers_; }
  Settings settings() const;
  QString lastError() const { return last_error_; }
  QString presetShown() const;
  QString infoText() const;  // the text panel beside the views  // what the preset box shows ("(file)" when a file is the source)
  QString statusText() const;
  const Source* source() const { return source_.get(); }

  // Export: the view's first figure to `path` (format by extension: .png .svg .pdf .csv;
  // CSV holds the data of all the view's figures); further figures go to STEM-2.EXT, ...
  // Returns the files written; on failure the message is in lastError() and it returns {}.
  QStringList exportView(int view, const QString& path);

  // Grabs the window with each view in front into DIR/explorer-<view>.png (current_only: the
  // view in front only, as it is).
  QStringList saveScreenshots(const QString& dir, bool current_only = false);

 signals:
  void idle();
  // A view was drawn: its final result, or (final false) a partial one while it is computed.
  void viewDrawn(int view, bool final);

 private:
  using UiApply = std::function<void()>;
  using Work = std::function<UiApply(const std::atomic<bool>& cancel, const Progress& progress)>;
  struct Job {
    QString what;
    Work work;
    bool follow_up = false;
  };

  void buildUi();  // the steps below, in this order
  void buildMenus();
  QScrollArea* buildControls();  // the three boxes below and the text of numbers
  QGroupBox* buildSourceBox();
  QGroupBox* buildHeadBox();
  QGroupBox* buildAllocationBox();
  void buildViews();
  void buildStatusBar();
  void connectControls();
  void submit(Job job);
  void startNext();
  void jobFinished();
  void showError(const QString& message);
  void commitBits();  // the bits-ladder field was committed (Enter, focus left, a list entry): checked here
  // A number field's commit (Enter or focus left): the text typed since the last commit is
  // applied when it is a value in range, else refused with `label`, the text, the range and
  // `kept()` (what the views keep); on_commit runs after a valid commit or one with nothing typed.
  template <class Field>
  void connectTyped(Field* field, const QString& label, std::function<QString()> kept, std::function<void()> on_commit);
  QLabel* addErrorRow(QFormLayout* form, const QString& field);  // the sentence row under a field
  void refuseField(const QString& field, const QString& message);
  void clearFieldError(const QString& field);
  void takeScenarioSettings();  // a scenario or run folder opened: its rate kind, ladder and budget
  void rdMethodsEdited();  // the methods field was edited (Enter, focus left, the menu): checked as bitsEdited
  void toggleRdMethod(const QString& text, bool on);  // a menu entry checked or unchecked
  void settingsChanged();
  void requestView(int view);
  void applyView(int view, const ViewResult& r);
  void drawView(int view, const ViewResult& r, bool final);  // final: the view is up to date (else a partial result)
  void showTip(QWidget* over, const QPoint& pos, const QString& text);  // a hover's text, kept inside the window
  void onOpened(std::shared_ptr<Source> src, std::shared_ptr<Engine> engine);
  void updateSourceControls();
  void exportDialog(bool csv);
  void openDialog();
  void reopenWithContext();
  void installHover(QCustomPlot* plot, int view, int figure);

  // Controls.
  QLabel* source_label_ = nullptr;
  QComboBox* preset_ = nullptr;
  IntField* context_ = nullptr;
  IntField* layer_ = nullptr;
  IntField* head_ = nullptr;
  NumberField* budget_ = nullptr;
  QSlider* budget_slider_ = nullptr;
  QComboBox* quantizer_ = nullptr;
  QComboBox* bits_ = nullptr;
  QString last_good_bits_;  // the ladder the views use (the field's last committed valid text)
  QComboBox* rate_kind_ = nullptr;
  QComboBox* solver_ = nullptr;
  QComboBox* family_ = nullptr;
  QComboBox* smoothing_ = nullptr;
  QLineEdit* rd_methods_ = nullptr;
  QString last_good_methods_;  // the methods the RD view uses (the field's last accepted text)
  QMenu* rd_methods_menu_ = nullptr;
  IntField* step_ = nullptr;
  QHash<QString, QLabel*> field_errors_;  // per field (typedFieldNames), its refusal sentence
  QString error_field_;                   // the field whose refusal lastError() holds ("" when none)
  QPushButton* run_button_ = nullptr;
  QPlainTextEdit* info_ = nullptr;
  QTabWidget* tabs_ = nullptr;
  std::vector<std::vector<QCustomPlot*>> plots_;  // per view, its figures' plots
  QProgressBar* progress_ = nullptr;
  QToolButton* cancel_ = nullptr;
  QLabel* status_ = nullptr;

  // State.
  std::shared_ptr<Source> source_;
  std::shared_ptr<Engine> engine_;
  std::vector<std::unique_ptr<ViewResult>> results_;
  std::vector<bool> dirty_;
  WaterfillNumbers wf_numbers_;
  QString last_error_;
  QString sticky_status_;  // a scenario run's result line, kept in the status bar until the next change
  bool updating_controls_ = false;
  int partial_ms_ = 400;

  // The job queue: one running, at most one waiting.
  bool running_ = false;
  std::shared_ptr<std::atomic<bool>> cancel_flag_;
  std::unique_ptr<Job> pending_;
  UiApply running_result_;
  quint64 generation_ = 0, running_generation_ = 0;
  QFuture<void> future_;
};

}  // namespace tierlab::explorer
