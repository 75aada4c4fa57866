#include <cstdio>
#include <cstring>

#include "pg/guard.hpp"

namespace concurrency::pg {

namespace {
void copy_text(char *dst, std::size_t size, const char *src) noexcept {
	if (!src)
		src = "";
	std::size_t n = std::strlen(src);
	if (n >= size)
		n = size - 1;
	std::memcpy(dst, src, n);
	dst[n] = '\0';
}
} // namespace

void PendingError::set(const char *sqlstate, const char *msg, const char *det, const char *hnt,
                       SourceLocation at) noexcept {
	if (sqlstate && std::strlen(sqlstate) == 5)
		copy_text(code, sizeof code, sqlstate);
	copy_text(message, sizeof message, msg);
	copy_text(detail, sizeof detail, det);
	copy_text(hint, sizeof hint, hnt);
	where = at;
}

// ereport(ERROR, …) spelled out, so that errfinish gets the thrower's file,
// line and function instead of these.
void PendingError::raise() const {
	if (errstart(ERROR, TEXTDOMAIN)) {
		errcode(MAKE_SQLSTATE(code[0], code[1], code[2], code[3], code[4]));
		errmsg_internal("%s", message);
		if (detail[0])
			errdetail_internal("%s", detail);
		if (hint[0])
			errhint("%s", hint);
		if (where.file)
			errfinish(where.file, where.line, where.function);
		else
			errfinish(__FILE__, __LINE__, __func__);
	}
	pg_unreachable();
}

} // namespace concurrency::pg
