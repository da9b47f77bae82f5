// SPDX-License-Identifier: MIT
// CuratorLock — Apache Curator's own locks (Debian's libcurator-recipes-java),
// for tests/zk_peers_test.sh: the peer dlock's ?layout=curator and
// ?layout=curator-rw lock beside.
//
//   java -cp ... CuratorLock HOSTS SESSION_MS PATH KIND MODE [ARGS]
//
// KIND: mutex (InterProcessMutex), read or write (InterProcessReadWriteLock).
// MODE hold: acquire, print "held", wait for a line (or the end) on stdin,
//   release, print "released".
// MODE try: acquire with a zero wait; print "held" (then release) or "busy".
// MODE count FILE SECS THREADS: THREADS clients (each its own session) add
//   one to the number in FILE under the lock until SECS have passed; print
//   "count N", the increments made.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessLock;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.retry.ExponentialBackoffRetry;

public final class CuratorLock {
    static String hosts, path, kind;
    static int sessionMs;

    static CuratorFramework client() throws Exception {
        CuratorFramework c = CuratorFrameworkFactory.newClient(hosts, sessionMs, 15000,
                new ExponentialBackoffRetry(100, 3));
        c.start();
        if (!c.blockUntilConnected(15, TimeUnit.SECONDS))
            throw new Exception("no connection to " + hosts);
        return c;
    }

    static InterProcessLock lock(CuratorFramework c) {
        switch (kind) {
        case "mutex": return new InterProcessMutex(c, path);
        case "read": return new InterProcessReadWriteLock(c, path).readLock();
        case "write": return new InterProcessReadWriteLock(c, path).writeLock();
        default: throw new IllegalArgumentException("KIND is mutex, read or write, not " + kind);
        }
    }

    public static void main(String[] a) throws Exception {
        hosts = a[0];
        sessionMs = Integer.parseInt(a[1]);
        path = a[2];
        kind = a[3];
        String mode = a[4];
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        if (mode.equals("count")) {
            Path file = Paths.get(a[5]);
            long end = System.nanoTime() + (long) (Double.parseDouble(a[6]) * 1e9);
            int threads = Integer.parseInt(a[7]);
            AtomicLong total = new AtomicLong();
            Exception[] errs = new Exception[threads];
            Thread[] ts = new Thread[threads];
            CuratorFramework[] cs = new CuratorFramework[threads];
            for (int t = 0; t < threads; t++)
                cs[t] = client();
            for (int t = 0; t < threads; t++) {
                final int i = t;
                ts[t] = new Thread(() -> {
                    try {
                        InterProcessLock m = lock(cs[i]);
                        while (System.nanoTime() < end) {
                            m.acquire();
                            try {
                                String s = new String(Files.readAllBytes(file), StandardCharsets.US_ASCII).trim();
                                long v = Long.parseLong(s) + 1;
                                Files.write(file, (v + "\n").getBytes(StandardCharsets.US_ASCII));
                            } finally {
                                m.release();
                            }
                            total.incrementAndGet();
                        }
                    } catch (Exception e) {
                        errs[i] = e;
                    }
                });
                ts[t].start();
            }
            for (int t = 0; t < threads; t++) {
                ts[t].join();
                if (errs[t] != null)
                    throw errs[t];
            }
            System.out.println("count " + total.get());
            System.out.flush();
            for (CuratorFramework c : cs)
                c.close();
            System.exit(0);
        }
        CuratorFramework c = client();
        InterProcessLock m = lock(c);
        if (mode.equals("try")) {
            boolean got = m.acquire(0, TimeUnit.MILLISECONDS);
            System.out.println(got ? "held" : "busy");
            if (got)
                m.release();
        } else if (mode.equals("hold")) {
            m.acquire();
            System.out.println("held");
            System.out.flush();
            in.readLine();
            m.release();
            System.out.println("released");
        } else {
            throw new IllegalArgumentException("MODE is hold, try or count, not " + mode);
        }
        System.out.flush();
        c.close();
        System.exit(0);
    }
}
