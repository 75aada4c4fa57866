// Name rules shared by subsystems (1–63 bytes) and queues (1–48 bytes).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace concurrency {

inline constexpr std::size_t max_subsystem_name_bytes = 63;
// "q_" + name must fit PostgreSQL's 63-byte identifiers with room for the
// derived index names, hence 48.
inline constexpr std::size_t max_queue_name_bytes = 48;

// Returns why `name` is not acceptable, or nothing when it is. A name is 1 to
// max_bytes bytes with no whitespace (ASCII or the common Unicode spaces) and no
// control characters; everything else, quotes and SQL included, is just a name.
std::optional<std::string> name_problem(std::string_view name, std::size_t max_bytes);

} // namespace concurrency
