//! Per-call resource watch: a deadline and a memory limit, both enforced through QuickJS's
//! interrupt handler, plus a hard allocation cap in the runtime's allocator.
//!
//! QuickJS polls the interrupt handler every few thousand bytecode operations; when it
//! returns `true` the engine raises an uncatchable exception that unwinds straight back to
//! Rust, past any `try`/`catch` in user code. The handler stops a call when its deadline has
//! passed or when the runtime holds more than the memory limit.
//!
//! The memory limit is deliberately soft. Refusing allocations at the limit (QuickJS's own
//! mechanism) makes allocation failures strike at arbitrary points inside the engine, and
//! some of its paths do not survive that (the parser dereferences a scope it failed to
//! allocate); it also reports them as a catchable `InternalError`, or as a thrown `null`
//! when not even that fits. The interrupt path is the same one timeouts use. Only a single
//! burst of allocation between two polls (`'x'.repeat(1e9)`) reaches the hard cap, twice the
//! limit, where the allocator refuses; parsing, which has no such burst, runs with the cap
//! lifted ([`Monitor::unlimited`]).

use std::alloc::{self, Layout};
use std::cell::Cell;
use std::ptr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use rquickjs::allocator::Allocator;
use rquickjs::{qjs, Context, Runtime};

#[derive(Debug)]
struct State {
    /// The runtime, for garbage collection before declaring it over the limit; null until
    /// [`Monitor::enforce`].
    runtime: Cell<*mut qjs::JSRuntime>,
    deadline: Cell<Option<Instant>>,
    timed_out: Cell<bool>,
    /// Bytes currently allocated, headers included.
    used: Cell<usize>,
    /// The soft limit; 0 means unlimited.
    limit: Cell<usize>,
    /// Set when a call was stopped or an allocation refused for memory.
    over_limit: Cell<bool>,
    /// Nesting depth of [`Monitor::unlimited`] sections.
    lifted: Cell<u32>,
    /// Bytes of converted (Rust-side) output the current call may still produce.
    output_left: Cell<usize>,
}

impl Default for State {
    fn default() -> Self {
        State {
            runtime: Cell::new(ptr::null_mut()),
            deadline: Cell::default(),
            timed_out: Cell::default(),
            used: Cell::default(),
            limit: Cell::default(),
            over_limit: Cell::default(),
            lifted: Cell::default(),
            output_left: Cell::default(),
        }
    }
}

/// Shared between a runtime's interrupt handler and allocator and the code that calls in.
#[derive(Debug, Clone)]
pub(crate) struct Monitor(Rc<State>);

impl Monitor {
    /// Creates a runtime whose running code can be interrupted by [`Monitor::start`]'s
    /// deadline and whose allocations can be capped by [`Monitor::enforce`].
    pub(crate) fn runtime() -> rquickjs::Result<(Runtime, Monitor)> {
        let monitor = Monitor(Rc::default());
        let runtime = Runtime::new_with_alloc(BudgetAllocator(Rc::clone(&monitor.0)))?;
        let state = Rc::clone(&monitor.0);
        runtime.set_interrupt_handler(Some(Box::new(move || must_stop(&state))));
        Ok((runtime, monitor))
    }

    /// Limits the runtime to `limit` bytes (0 = no limit). Called only once the context
    /// exists: QuickJS does not survive allocation failures while it creates a runtime or
    /// adds intrinsics to a context.
    pub(crate) fn enforce(&self, context: &Context, limit: usize) {
        self.0.runtime.set(context.get_runtime_ptr());
        self.0.limit.set(limit);
    }

    /// Arms the deadline `timeout` from now and clears both flags; the deadline is disarmed
    /// when the guard drops.
    pub(crate) fn start(&self, timeout: Duration) -> Armed<'_> {
        self.0.timed_out.set(false);
        self.0.over_limit.set(false);
        self.0.output_left.set(match self.0.limit.get() {
            0 => usize::MAX,
            limit => limit,
        });
        self.0.deadline.set(Instant::now().checked_add(timeout));
        Armed(self)
    }

    /// Gives the running call a fresh deadline and output budget, as a new query-server
    /// prompt would get (a list function's every row is one prompt in CouchDB).
    pub(crate) fn renew(&self, timeout: Duration) {
        self.0.output_left.set(match self.0.limit.get() {
            0 => usize::MAX,
            limit => limit,
        });
        self.0.deadline.set(Instant::now().checked_add(timeout));
    }

    /// Whether the interrupt handler stopped the current call.
    pub(crate) fn timed_out(&self) -> bool {
        self.0.timed_out.get()
    }

    /// Whether the current call was stopped, or an allocation refused, for memory, or the
    /// runtime still holds more than the limit after a garbage collection. Only called
    /// while the runtime is locked (inside `Context::with`).
    pub(crate) fn out_of_memory(&self) -> bool {
        self.0.over_limit.get() || over_limit_after_gc(&self.0)
    }

    /// Charges `bytes` of converted output to the current call; `false` (and the call
    /// counts as out of memory) once the call has produced more than the memory limit.
    pub(crate) fn charge_output(&self, bytes: usize) -> bool {
        match self.0.output_left.get().checked_sub(bytes) {
            Some(left) => {
                self.0.output_left.set(left);
                true
            }
            None => {
                self.0.over_limit.set(true);
                false
            }
        }
    }

    /// Whether the current call must stop now (past its deadline or over the memory limit),
    /// for loops in Rust that QuickJS's own polling does not cover.
    pub(crate) fn must_stop(&self) -> bool {
        must_stop(&self.0)
    }

    /// Runs `f` with the hard cap lifted, for work that cannot survive allocation failure.
    pub(crate) fn unlimited<R>(&self, f: impl FnOnce() -> R) -> R {
        self.0.lifted.set(self.0.lifted.get() + 1);
        let result = f();
        self.0.lifted.set(self.0.lifted.get() - 1);
        result
    }
}

/// The interrupt handler: stop at the deadline or above the memory limit.
fn must_stop(state: &State) -> bool {
    if over_limit_after_gc(state) {
        state.over_limit.set(true);
        return true;
    }
    let Some(deadline) = state.deadline.get() else {
        return false;
    };
    if Instant::now() < deadline {
        return false;
    }
    state.timed_out.set(true);
    true
}

/// Whether the heap exceeds the limit even once cyclic garbage is collected (QuickJS frees
/// everything else by reference counting as soon as it dies).
fn over_limit_after_gc(state: &State) -> bool {
    let over = || {
        let limit = state.limit.get();
        limit != 0 && state.used.get() > limit
    };
    if !over() {
        return false;
    }
    let runtime = state.runtime.get();
    if !runtime.is_null() {
        // SAFETY: only reached from the interrupt handler or from code holding the runtime
        // lock, on a live runtime; QuickJS itself collects at such points (allocations).
        unsafe { qjs::JS_RunGC(runtime) };
    }
    over()
}

/// Keeps the deadline armed while alive.
pub(crate) struct Armed<'a>(&'a Monitor);

impl Drop for Armed<'_> {
    fn drop(&mut self) {
        self.0 .0.deadline.set(None);
    }
}

/// Every block carries its size in a header, aligned as malloc aligns.
const ALIGN: usize = 16;
const HEADER: usize = 16;

/// The global allocator, counting bytes, refusing beyond the hard cap, and keeping each
/// block's size in a header.
struct BudgetAllocator(Rc<State>);

impl BudgetAllocator {
    /// Reserves `size` user bytes; the total block size on success.
    fn reserve(&self, size: usize) -> Option<usize> {
        let total = size.checked_add(HEADER)?.checked_next_multiple_of(ALIGN)?;
        let used = self.0.used.get().checked_add(total)?;
        let hard_cap = self.0.limit.get().saturating_mul(2);
        if hard_cap != 0 && used > hard_cap && self.0.lifted.get() == 0 {
            self.0.over_limit.set(true);
            return None;
        }
        self.0.used.set(used);
        Some(total)
    }

    fn release(&self, total: usize) {
        self.0.used.set(self.0.used.get() - total);
    }

    fn allocate(&mut self, size: usize, zeroed: bool) -> *mut u8 {
        let Some(total) = self.reserve(size) else {
            return ptr::null_mut();
        };
        let layout = block_layout(total);
        // SAFETY: `total` ≥ HEADER > 0, so the layout is non-zero-sized.
        let block = unsafe {
            if zeroed {
                alloc::alloc_zeroed(layout)
            } else {
                alloc::alloc(layout)
            }
        };
        if block.is_null() {
            self.release(total);
            return ptr::null_mut();
        }
        // SAFETY: the block is at least HEADER bytes and ALIGN-aligned.
        unsafe { write_header(block, total) }
    }
}

fn block_layout(total: usize) -> Layout {
    Layout::from_size_align(total, ALIGN).expect("block size overflows a layout")
}

/// Stores the block size in the header; returns the user pointer.
unsafe fn write_header(block: *mut u8, total: usize) -> *mut u8 {
    block.cast::<usize>().write(total);
    block.add(HEADER)
}

/// The block start and total size of a user pointer handed out by `write_header`.
unsafe fn block_of(user: *mut u8) -> (*mut u8, usize) {
    let block = user.sub(HEADER);
    (block, block.cast::<usize>().read())
}

// SAFETY: every pointer returned is either null or HEADER bytes into a live block of the
// recorded size, allocated from the global allocator with ALIGN alignment.
unsafe impl Allocator for BudgetAllocator {
    fn alloc(&mut self, size: usize) -> *mut u8 {
        self.allocate(size, false)
    }

    fn calloc(&mut self, count: usize, size: usize) -> *mut u8 {
        match count.checked_mul(size) {
            Some(bytes) => self.allocate(bytes, true),
            None => ptr::null_mut(),
        }
    }

    unsafe fn dealloc(&mut self, user: *mut u8) {
        let (block, total) = block_of(user);
        self.release(total);
        alloc::dealloc(block, block_layout(total));
    }

    unsafe fn realloc(&mut self, user: *mut u8, new_size: usize) -> *mut u8 {
        let (block, old_total) = block_of(user);
        self.release(old_total);
        let Some(new_total) = self.reserve(new_size) else {
            self.0.used.set(self.0.used.get() + old_total);
            return ptr::null_mut();
        };
        let moved = alloc::realloc(block, block_layout(old_total), new_total);
        if moved.is_null() {
            self.release(new_total);
            self.0.used.set(self.0.used.get() + old_total);
            return ptr::null_mut();
        }
        write_header(moved, new_total)
    }

    unsafe fn usable_size(user: *mut u8) -> usize {
        block_of(user).1 - HEADER
    }
}
