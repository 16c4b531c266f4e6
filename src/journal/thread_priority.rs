//! The merger thread's CPU priority ([`super::JournalOptions::merger_nice_increment`]).
//!
//! Linux keeps a nice value per thread, so a thread can lower its own priority without
//! touching the process's other threads; elsewhere nothing is changed.

/// Raises the calling thread's nice value by `increment` (the kernel caps it at 19), so that
/// it runs when a core is free rather than taking an equal share from busier threads; `0`
/// changes nothing. Only a lowering is asked, which needs no privilege.
///
/// Errors: the system call's, in the unlikely case it refuses (a sandbox's filter); the
/// thread then runs at the priority it had.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub(crate) fn lower_calling_threads_priority(increment: u8) -> std::io::Result<()> {
    if increment == 0 {
        return Ok(());
    }
    // SAFETY: `__errno_location` returns this thread's errno, valid for the thread's life;
    // `nice` is a plain system call on the calling thread (Linux: per thread), passed no
    // memory. errno is cleared first because -1 is also a valid new nice value.
    let rc = unsafe {
        *libc::__errno_location() = 0;
        libc::nice(libc::c_int::from(increment))
    };
    if rc == -1 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(0) {
            return Err(e);
        }
    }
    Ok(())
}

/// Elsewhere: the thread keeps its priority (a process-wide nice would lower the block
/// loop's too).
#[cfg(not(target_os = "linux"))]
pub(crate) fn lower_calling_threads_priority(_increment: u8) -> std::io::Result<()> {
    Ok(())
}
