//! Advice to the kernel about mapped file pages: searches that read a
//! whole stretch of a map (the dlopen strings, the reference scan) ask for
//! its pages in one call instead of faulting them in a few at a time.

/// Maps the pages of `part` in one call (`MADV_POPULATE_READ`, Linux 5.14)
/// rather than one page fault per few pages; where the kernel lacks it the
/// search faults them in as before.
pub fn populate(part: &[u8]) {
    #[cfg(target_os = "linux")]
    {
        const MADV_POPULATE_READ: libc::c_int = 22;
        const PAGE: usize = 4096;
        let addr = part.as_ptr() as usize;
        let first = addr / PAGE * PAGE;
        let len = addr + part.len() - first;
        // SAFETY: advice only: it reads the pages of a range this process
        // has mapped (the slice's own pages); it changes no memory and, on
        // failure (an old kernel, memory that is no file mapping), nothing.
        let _ = unsafe { libc::madvise(first as *mut libc::c_void, len, MADV_POPULATE_READ) };
    }
}
