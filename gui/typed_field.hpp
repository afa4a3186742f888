#pragma once
// tierlab-explorer's number fields (the budget B, the context length T, the layer, the KV
// head, the decode step): a spin box whose text is the user's until it is committed (Enter
// or focus left). QSpinBox's own validator refuses a keystroke that would leave the range
// (`100` became 10.00, `-3` became 3.00, layer 9 could not be typed) and throws away what is
// not a number on focus out (`0.01`, `abc` vanished), without a word. TypedField keeps every
// keystroke, turns red while its text is not a value in range, never emits a value for a
// partial text (keyboard tracking off), and hands the committed text to the window
// (takeTyped), which applies it or refuses it with a sentence naming the field, the text and
// the valid range (MainWindow::commitTyped). Qt puts the last valid value back in the field on
// a refused commit; the window says so beside the field. The arrows and the slider give
// values in range and are applied as they come.
#include <QAbstractSpinBox>
#include <QDoubleSpinBox>
#include <QLineEdit>
#include <QLocale>
#include <QSpinBox>
#include <QString>
#include <QValidator>

#include <cmath>
#include <optional>
#include <type_traits>

namespace tierlab::explorer {

// Why `text` is not a value of the field (empty when it is): a number, whole when decimals
// is 0, with at most `decimals` decimals, from lo to hi (unit after the range).
inline QString number_problem(const QString& text, double lo, double hi, int decimals, const QString& unit) {
  const auto fmt = [](double v) { return QString::number(v, 'g', 10); };
  const QString range = QString("%1 to %2%3").arg(fmt(lo), fmt(hi), unit.isEmpty() ? QString() : " " + unit);
  const QString what = decimals == 0 ? QString("a whole number") : QString("a number");
  const QString t = text.trimmed();
  if (t.isEmpty()) return QString("the field is empty; valid: %1 from %2").arg(what, range);
  bool ok = false;
  const double v = QLocale::c().toDouble(t, &ok);
  if (!ok || !std::isfinite(v)) return QString("'%1' is not a number; valid: %2 from %3").arg(t, what, range);
  if (decimals == 0 && v != std::floor(v)) return QString("'%1' is not a whole number; valid: %2 from %3").arg(t, what, range);
  const int dot = t.indexOf('.');
  if (decimals > 0 && dot >= 0 && !t.contains('e', Qt::CaseInsensitive) && t.size() - dot - 1 > decimals)
    return QString("'%1' has more than %2 decimals; valid: %3 from %4 with at most %2 decimals").arg(t).arg(decimals).arg(what, range);
  if (v < lo || v > hi) return QString("%1 is outside the valid range %2").arg(t, range);
  return {};
}

template <class Base>  // QSpinBox or QDoubleSpinBox
class TypedField : public Base {
  using Value = std::conditional_t<std::is_same_v<Base, QDoubleSpinBox>, double, int>;

 public:
  explicit TypedField(QString unit = {}) : unit_(std::move(unit)) {
    this->setKeyboardTracking(false);  // a value is emitted at Enter or focus out, never per keystroke
    QObject::connect(this->lineEdit(), &QLineEdit::textEdited, this, [this](const QString& text) {
      typed_ = text;
      markInvalid(!problem(text).isEmpty());
    });
  }

  // Why the field's text (prefix and suffix allowed) is not a value of the field; empty when it is.
  QString problem(const QString& text) const {
    return number_problem(strip(text), static_cast<double>(this->minimum()), static_cast<double>(this->maximum()),
                          decimalsAllowed(), unit_);
  }
  // The text typed since the last commit (nullopt when nothing was typed), cleared.
  std::optional<QString> takeTyped() {
    std::optional<QString> t = typed_;
    typed_.reset();
    if (t) *t = strip(*t);
    markInvalid(false);  // the field shows a value again: Qt put back the last valid one if refused
    return t;
  }
  void markInvalid(bool on) {
    this->setStyleSheet(on ? QString("%1 { background: #ffe0e0; }").arg(Base::staticMetaObject.className()) : QString());
  }
  QLineEdit* editor() const { return this->lineEdit(); }

  QValidator::State validate(QString& input, int&) const override {
    return problem(input).isEmpty() ? QValidator::Acceptable : QValidator::Intermediate;  // never Invalid: every keystroke stays
  }
  void fixup(QString&) const override {}  // nothing rewritten: a text that is not a value is refused at commit

 protected:
  Value valueFromText(const QString& text) const override {
    return static_cast<Value>(QLocale::c().toDouble(strip(text)));
  }
  QString textFromValue(Value v) const override {
    if constexpr (std::is_same_v<Value, int>) {
      return QString::number(v);
    } else {  // the value as typed: at least two decimals, no trailing zeros past them
      QString s = QString::number(v, 'f', this->decimals());
      while (s.endsWith('0') && s.size() - s.indexOf('.') - 1 > 2) s.chop(1);
      return s;
    }
  }

 private:
  int decimalsAllowed() const {
    if constexpr (std::is_same_v<Value, int>) return 0;
    else return this->decimals();
  }
  QString strip(QString t) const {
    t = t.trimmed();
    const QString pre = this->prefix().trimmed(), suf = this->suffix().trimmed();
    if (!pre.isEmpty() && t.startsWith(pre)) t = t.mid(pre.size());
    if (!suf.isEmpty() && t.endsWith(suf)) t.chop(suf.size());
    return t.trimmed();
  }

  QString unit_;
  std::optional<QString> typed_;
};

using IntField = TypedField<QSpinBox>;
using NumberField = TypedField<QDoubleSpinBox>;

}  // namespace tierlab::explorer
