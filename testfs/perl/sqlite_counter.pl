#!/usr/bin/perl
# A counter in a SQLite database through DBD::SQLite, as Perl CGI and
# FastCGI scripts keep one.
#
#   sqlite_counter.pl DB MODE SYNC keep|per N
#
# Each of the N transactions is BEGIN IMMEDIATE (begin_work), read the
# counter, write it plus one, COMMIT, with journal_mode=MODE and
# synchronous=SYNC, on a connection opened for it ("per") or kept open
# ("keep"). The first transaction creates the table if need be.
# SQLITE_BUSY is met by beginning again, the connection's set-up too:
# two connections that switch a new database to WAL at once may get it
# without waiting (one holds a read lock), on any file system.
#
# Anomalies are printed one per line; the last line is
# "DONE n=N retries=R" (R: transactions begun again after SQLITE_BUSY).
use strict;
use warnings;
use DBI;

my ($path, $mode, $sync, $keep, $n) = @ARGV;
die "usage: $0 DB MODE SYNC keep|per N\n" unless defined $n;
$| = 1;
my ($retries, $last) = (0, -1);

sub connect_db {
    my $dbh = DBI->connect("dbi:SQLite:dbname=$path", "", "",
        {RaiseError => 1, PrintError => 0, AutoCommit => 1, sqlite_use_immediate_transaction => 1});
    $dbh->sqlite_busy_timeout(60000);
    $dbh->selectall_arrayref("PRAGMA journal_mode=$mode");
    $dbh->do("PRAGMA synchronous=$sync");
    return $dbh;
}

sub connect_retrying {
    for (1 .. 100) {
        my $dbh = eval { connect_db() };
        return $dbh if $dbh;
        die $@ unless $@ =~ /locked|busy/;
        $retries++;
        select(undef, undef, undef, 0.01);
    }
    die "gave up after 100 tries\n";
}

sub transaction {
    my ($dbh, $fn) = @_;
    for (1 .. 100) {
        my $ok = eval { $dbh->begin_work; $fn->($dbh); $dbh->commit; 1 };
        return if $ok;
        die $@ unless $@ =~ /locked|busy/;
        $retries++;
        eval { $dbh->rollback };
        select(undef, undef, undef, 0.01);
    }
    die "gave up after 100 tries\n";
}

sub create {
    my ($dbh) = @_;
    $dbh->do("CREATE TABLE IF NOT EXISTS t(v INTEGER)");
    $dbh->do("INSERT INTO t SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM t)");
}

sub increment {
    my ($dbh) = @_;
    my ($v) = $dbh->selectrow_array("SELECT v FROM t");
    print "STALE read $v after writing $last\n" if $v < $last;
    $dbh->do("UPDATE t SET v=?", undef, $v + 1);
    $last = $v + 1;
}

my $dbh = connect_retrying();
transaction($dbh, \&create);
for (1 .. $n) {
    if ($keep ne "keep") {
        $dbh->disconnect;
        $dbh = connect_retrying();
    }
    transaction($dbh, \&increment);
}
$dbh->disconnect;
print "DONE n=$n retries=$retries\n";
