// A servlet's way to keep a count in a file, from the request threads of
// one JVM: each request reads the file whole, adds one and writes it back
// (Files.readAllLines, Files.write with TRUNCATE_EXISTING), no lock.
//
//   java -cp DIR RMWServlet FILE THREADS ROUNDS
//
// Each of THREADS threads runs ROUNDS requests. A read that is not one
// number is printed ("TORN ..."); the last line is "DONE rounds=N".
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

public class RMWServlet {
    public static void main(String[] args) throws Exception {
        Path p = Paths.get(args[0]);
        int threads = Integer.parseInt(args[1]), rounds = Integer.parseInt(args[2]);
        ExecutorService pool = Executors.newFixedThreadPool(threads);
        List<Future<Integer>> done = new ArrayList<>();
        for (int i = 0; i < threads; i++) {
            done.add(pool.submit(() -> {
                int n = 0;
                for (int r = 0; r < rounds; r++) {
                    List<String> lines = Files.readAllLines(p);
                    if (lines.size() != 1 || !lines.get(0).matches("[0-9]+")) {
                        System.out.println("TORN " + lines);
                        continue;
                    }
                    int count = Integer.parseInt(lines.get(0));
                    Files.write(p, List.of(Integer.toString(count + 1)), StandardOpenOption.TRUNCATE_EXISTING);
                    n++;
                }
                return n;
            }));
        }
        int n = 0;
        for (Future<Integer> f : done) {
            n += f.get();
        }
        pool.shutdown();
        System.out.println("DONE rounds=" + n);
    }
}
