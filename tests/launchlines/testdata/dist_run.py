"""Stand-in for torchchat's dist_run.py."""
import standin

if __name__ == "__main__":
    standin.run("dist_run.py")
