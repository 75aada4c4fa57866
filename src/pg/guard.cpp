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

void PendingError::set(const char *sqlstate, const char *msg, const char *det, const char *hnt) noexcept {
	if (sqlstate && std::strlen(sqlstate) == 5)
		copy_text(code, sizeof code, sqlstate);
	copy_text(message, sizeof message, msg);
	copy_text(detail, sizeof detail, det);
	copy_text(hint, sizeof hint, hnt);
}

void PendingError::raise() const {
	ereport(ERROR, (errcode(MAKE_SQLSTATE(code[0], code[1], code[2], code[3], code[4])),
	                errmsg_internal("%s", message), detail[0] ? errdetail_internal("%s", detail) : 0,
	                hint[0] ? errhint("%s", hint) : 0));
	pg_unreachable();
}

} // namespace concurrency::pg
