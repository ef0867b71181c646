"""Stand-in for torchtitan's torchtitan.train (run with -m)."""
import standin

if __name__ == "__main__":
    standin.run("torchtitan.train")
