// Error categories (error.hpp).
#include "model/base/error.hpp"

namespace tierlab {

void rethrow_with_context(const std::exception_ptr& e, const std::string& context) {
  try {
    std::rethrow_exception(e);
  } catch (const FormatError& x) {
    throw FormatError(context + ": " + x.what());
  } catch (const InputError& x) {
    throw InputError(context + ": " + x.what());
  } catch (const RecomputeError& x) {
    throw RecomputeError(context + ": " + x.what());
  } catch (const std::exception& x) {
    throw std::logic_error(context + ": " + x.what());
  }
}

}  // namespace tierlab
