// Who may do what on a queue: the permission check every queue function makes
// first, and the switch to the queue's owner for the statements it then runs.
//
// The task functions are SECURITY INVOKER. Each checks that the calling role
// (GetUserId: SET ROLE and SECURITY DEFINER callers count as themselves) holds
// the permission it needs on the queue, and then runs its SPI statements as
// the owner of the queue's table, in a security-restricted operation, the way
// VACUUM runs index functions as the table's owner. The caller needs no
// privilege on the table at all; the owner's rights are used only by the
// statements the function wrote.
//
// Permissions live in concurrency.queue_permission (extension configuration,
// dumped by pg_dump). Each backend caches the rows of a queue and reloads them
// after any change to that table (a statement trigger sends a relcache
// invalidation) or when the queue's table is another one (dropped and
// re-created), so the check on the hot path costs a hash lookup and a role
// membership test.
#pragma once

#include <string>

#include "queue/permission_set.hpp"
#include "queue/queue.hpp"

namespace concurrency::queue {

// While it lives, the current user is `role`, in a security-restricted
// operation (no SET ROLE, no temporary objects, nothing that outlives the
// call); the previous user and context come back when it goes, also when an
// error unwinds it.
class AsRole {
  public:
	explicit AsRole(Oid role) noexcept;
	~AsRole();
	AsRole(const AsRole &) = delete;
	AsRole &operator=(const AsRole &) = delete;

  private:
	Oid saved_user_;
	int saved_context_;
};

// Raises 42501 unless the current user holds `p` on `q` (its owner and
// superusers hold all); `function` names the refused call in the message.
// Then runs the rest of the call as the queue's owner: keep the result alive
// for as long as the function runs statements on the queue.
[[nodiscard]] AsRole authorize(Queue &q, Permission p, const char *function);

// Raises 42501 unless `role` holds `p` on `q`. For the SECURITY DEFINER
// functions, whose caller is not the current user.
void require(Queue &q, Oid role, Permission p, const char *function);

// Whether the current user holds `p` on `q` (no error).
bool holds(Queue &q, Permission p);
// Whether `role` holds `p` on `q` (no error): for SECURITY DEFINER functions.
bool holds(Queue &q, Oid role, Permission p);

// The owner of the queue's table.
Oid queue_owner(Queue &q);

// Deletes every permission of `queue` (its table was created anew: a queue
// re-created under an old name starts with none) and every permission of a
// role that no longer exists. SPI connected, as the extension owner.
void clear_permissions(const std::string &queue);

// Deletes every permission of a role that no longer exists. SPI connected,
// as the extension owner.
void forget_dropped_roles();

// Registers the cache invalidation callback (from _PG_init).
void permissions_init();

// What grant_queue and revoke_queue ask of the distributed room
// (queue/distributed/), which sets them at start-up, so that the queue's
// core does not depend on it: `distributed`, for a call `what` on queue `q`,
// whether it is a distributed queue, having refused the call (0A000) on a
// node that does not keep its catalog; `sync_catalog`, after the change of a
// distributed queue's catalog rows, copies them to every other node. Before
// they are set, no queue is distributed.
struct PermissionHooks {
	bool (*distributed)(Queue &q, const char *what) = nullptr;
	void (*sync_catalog)(const std::string &queue) = nullptr;
};
void set_permission_hooks(const PermissionHooks &hooks);

} // namespace concurrency::queue
