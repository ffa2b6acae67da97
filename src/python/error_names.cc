// mha::Error reaching Python says Python's names: the C++ messages name C++ calls
// ("PagedKvCache::AddSequence", "call cache.AppendSlots first"), which a Python user
// knows as PagedKvCache.add_sequence and cache.append_slots. Types are kept:
// OutOfBlocksError stays mha.OutOfBlocksError, every other mha::Error a ValueError.
#include <cctype>
#include <exception>
#include <regex>
#include <string>

#include "mha/paged_kv_cache.hpp"
#include "src/python/bindings.h"

namespace mha::python {
namespace {

// AppendSlots -> append_slots.
std::string SnakeCase(const std::string& name) {
  std::string snake;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (std::isupper(static_cast<unsigned char>(c)) && i > 0) snake.push_back('_');
    snake.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  return snake;
}

// Class::Method and cache.Method in a message, as Python spells them.
std::string WithPythonNames(const std::string& message) {
  static const std::regex kCall(R"(\b([A-Z]\w*)::([A-Z]\w*)|\b(cache)\.([A-Z]\w*))");
  std::string text;
  auto last = message.cbegin();
  for (std::sregex_iterator it(message.begin(), message.end(), kCall), end; it != end;
       ++it) {
    const std::smatch& match = *it;
    const bool member = match[1].matched;
    text.append(last, match[0].first);
    text += (member ? match[1].str() : match[3].str()) + "." +
            SnakeCase(member ? match[2].str() : match[4].str());
    last = match[0].second;
  }
  return text.append(last, message.cend());
}

}  // namespace

void RegisterErrorNames() {
  // Tried before the translators registered earlier (OutOfBlocksError's own).
  py::register_exception_translator([](std::exception_ptr error) {
    try {
      if (error) std::rethrow_exception(error);
    } catch (const OutOfBlocksError& e) {
      const py::object type = py::module_::import("mha").attr("OutOfBlocksError");
      PyErr_SetString(type.ptr(), WithPythonNames(e.what()).c_str());
    } catch (const Error& e) {
      PyErr_SetString(PyExc_ValueError, WithPythonNames(e.what()).c_str());
    }
  });
}

}  // namespace mha::python
