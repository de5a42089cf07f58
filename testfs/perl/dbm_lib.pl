# Ties a hash to a DBM file the way an old script would, with any of the
# modules the tests use: dbmopen (AnyDBM_File: NDBM_File on Debian),
# NDBM_File, GDBM_File, DB_File, SDBM_File.
#
#   require "$FindBin::Bin/dbm_lib.pl";
use strict;
use warnings;
use Fcntl qw(O_RDWR O_CREAT O_RDONLY);

sub dbm_load {
    my ($module) = @_;
    return if $module eq 'dbmopen';
    eval "require $module; 1" or die "$module: $@";
}

# dbm_tie(\%h, MODULE, FILE, WRITE, NOLOCK): true on success, else $! says
# why. NOLOCK: the script locks for itself, so gdbm must not (its own
# flock on a second descriptor would conflict with the script's).
sub dbm_tie {
    my ($h, $module, $file, $write, $nolock) = @_;
    return dbmopen(%$h, $file, $write ? 0644 : 0) if $module eq 'dbmopen';
    if ($module eq 'GDBM_File') {
        # GDBM_File takes gdbm's flags, not open(2)'s.
        my $flags = $write ? GDBM_File::GDBM_WRCREAT() : GDBM_File::GDBM_READER();
        $flags |= GDBM_File::GDBM_NOLOCK() if $nolock;
        return tie(%$h, 'GDBM_File', $file, $flags, 0644);
    }
    return tie(%$h, $module, $file, $write ? O_RDWR | O_CREAT : O_RDONLY, 0644);
}

sub dbm_untie {
    my ($h, $module) = @_;
    return $module eq 'dbmopen' ? dbmclose(%$h) : untie(%$h);
}

# dbm_error(): gdbm's own error for the last failed call ($! is often
# meaningless then), when gdbm is what failed (GDBM_File, NDBM_File and
# dbmopen on Debian).
sub dbm_error {
    return eval { require GDBM_File; "gdbm=\"$GDBM_File::gdbm_errno\"" } // '';
}

# dbm_data_file(MODULE, FILE): the file holding the data, which a script
# may flock: FILE for gdbm and DB_File, FILE.pag for ndbm and sdbm.
sub dbm_data_file {
    my ($module, $file) = @_;
    return $module =~ /^(GDBM_File|DB_File)$/ ? $file : "$file.pag";
}

1;
